"""Which :class:`LayerKind` a module has: the registry's kinds, plus overrides for one call.

``LAYER_KINDS`` holds kind classes by name; a kind covers the module types in its
``module_types``.  A module gets the kind registered for the most derived class of its
type's MRO that any kind covers, so a kind for ``nn.Conv2d`` subclasses is found before
the generic conv kind.  Among kinds covering the same type, the one registered last wins
(a user overrides a built-in kind by registering another), and kinds passed for one call
(``layer_kinds=``) win over the registry.

A kind may name a module type by its qualified name (``'transformers.pytorch_utils.Conv1D'``)
instead of the class, so that razorlib need not import an optional package to cover it.
"""
from typing import Dict, Iterable, Optional, Union

import torch.nn as nn

from ..registry import LAYER_KINDS
from .base import LayerKind

__all__ = ['KindTable', 'LayerKindsArg', 'as_table', 'kind_of']

LayerKindsArg = Optional[Iterable[Union[LayerKind, type, dict, str]]]


def _build(kind: Union[LayerKind, type, dict, str]) -> LayerKind:
    if isinstance(kind, LayerKind):
        return kind
    if isinstance(kind, type) and issubclass(kind, LayerKind):
        return kind()
    if isinstance(kind, str):
        kind = dict(type=kind)
    if isinstance(kind, dict):
        return LAYER_KINDS.build(kind)
    raise TypeError(f'layer_kinds takes LayerKind instances, classes, names or config '
                    f'dicts, got {kind!r}')


def _qualified(cls: type) -> str:
    return f'{cls.__module__}.{cls.__qualname__}'


def _by_type(kinds: Iterable[LayerKind]) -> Dict[Union[type, str], LayerKind]:
    table: Dict[Union[type, str], LayerKind] = {}
    for kind in kinds:
        if not kind.module_types:
            raise ValueError(f'{type(kind).__name__} covers no module type: set its '
                             'module_types')
        for module_type in kind.module_types:
            table[module_type] = kind
    return table


class _Registered:
    """The registry's kinds by module type, rebuilt when the registry changes."""

    def __init__(self) -> None:
        self._snapshot: tuple = ()
        self.table: Dict[Union[type, str], LayerKind] = {}

    def current(self) -> Dict[Union[type, str], LayerKind]:
        snapshot = tuple(LAYER_KINDS.module_dict.values())
        if snapshot != self._snapshot:
            self.table = _by_type(cls() for cls in snapshot)
            self._snapshot = snapshot
        return self.table


_REGISTERED = _Registered()


class KindTable:
    """Looks up the kind of a module; ``overrides`` take precedence over the registry.

    Args:
        overrides: kinds for this call only: instances, classes, registered names or
            config dicts (``dict(type='ConvKind')``).

    Example:
        >>> table = KindTable()
        >>> type(table.kind_of(nn.BatchNorm2d(4))).__name__
        'BatchNormKind'
        >>> table.kind_of(nn.ReLU()) is None
        True
    """

    def __init__(self, overrides: LayerKindsArg = None) -> None:
        self.overrides = _by_type(_build(k) for k in (overrides or ()))
        self._cache: Dict[type, Optional[LayerKind]] = {}
        self._registered: Optional[Dict[Union[type, str], LayerKind]] = None

    def kind_of(self, module: nn.Module) -> Optional[LayerKind]:
        """The kind of ``module``, or None if no kind covers its type."""
        registered = _REGISTERED.current()
        if registered is not self._registered:
            self._cache, self._registered = {}, registered
        cls = type(module)
        if cls not in self._cache:
            self._cache[cls] = next(
                (table[key] for base in cls.__mro__ for key in (base, _qualified(base))
                 for table in (self.overrides, registered) if key in table), None) or \
                self._claimed(cls, registered)
        kind = self._cache[cls]
        return kind if kind is None or kind.covers(module) else None

    def _claimed(self, cls: type, registered: Dict[Union[type, str], LayerKind]
                 ) -> Optional[LayerKind]:
        """The kind whose :meth:`~LayerKind.claims` takes ``cls`` (overrides first, then the
        kind registered last)."""
        for table in (self.overrides, registered):
            kinds = list(dict.fromkeys(table.values()))
            for kind in reversed(kinds):
                if kind.claims(cls):
                    return kind
        return None


def kind_of(module: nn.Module, layer_kinds: LayerKindsArg = None) -> Optional[LayerKind]:
    """The kind of ``module`` (None if razorlib knows no kind for it).

    Example:
        >>> type(kind_of(nn.Linear(2, 3))).__name__
        'LinearKind'
    """
    table = KindTable(layer_kinds) if layer_kinds else _DEFAULT
    return table.kind_of(module)


_DEFAULT = KindTable()


def as_table(layer_kinds: Union[KindTable, LayerKindsArg]) -> KindTable:
    """A :class:`KindTable` from what a ``layer_kinds=`` argument holds."""
    if isinstance(layer_kinds, KindTable):
        return layer_kinds
    return KindTable(layer_kinds) if layer_kinds else _DEFAULT
