"""Find the modules a conversion replaces, once per place they sit in a model, and
replace them all or none."""
from typing import Callable, List, Optional, Tuple

import torch.nn as nn

__all__ = ['children_matching', 'replace_children']


def children_matching(model: nn.Module, matches: Callable[[nn.Module], bool]
                      ) -> List[Tuple[str, nn.Module, str, nn.Module]]:
    """``(qualified name, parent, attribute, module)`` of every module under ``model`` for
    which ``matches`` is true, once per place it sits (a shared module appears under each
    parent, so a conversion can replace it everywhere by one new module).

    Example:
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(2, 2)))
        >>> [name for name, *_ in children_matching(model, lambda m: isinstance(m, nn.Linear))]
        ['0', '1.1']
    """
    found = []
    for parent_name, parent in model.named_modules(remove_duplicate=False):
        for attr, child in parent._modules.items():
            if child is not None and matches(child):
                found.append((f'{parent_name}.{attr}' if parent_name else attr, parent,
                              attr, child))
    return found


def replace_children(model: nn.Module, matches: Callable[[nn.Module], bool],
                     convert: Callable[[nn.Module], nn.Module], *,
                     unsupported: Callable[[nn.Module], Optional[str]] = lambda module: None,
                     converter: str = 'the conversion', in_turn: bool = False) -> nn.Module:
    """Replace every module under ``model`` that ``matches`` by ``convert(module)``, in
    place; returns ``model``.  ``unsupported(module)`` runs on every one first and names
    what of it ``convert`` cannot express (falsy: nothing); the first such module raises
    ValueError naming it, its class, the problem and ``converter``, so an error leaves
    ``model`` unchanged.  A module shared by several parents is converted once and stays
    shared.  ``in_turn`` replaces each module as soon as it is converted, so that only one
    holds its weights twice at a time (a conversion that copies large weights), at the
    cost of a model half converted should ``convert`` itself raise.

    Example:
        >>> model = nn.Sequential(nn.ReLU(), nn.Sequential(nn.ReLU()))
        >>> replace_children(model, lambda m: isinstance(m, nn.ReLU), lambda m: nn.GELU())
        Sequential(
          (0): GELU(approximate='none')
          (1): Sequential(
            (0): GELU(approximate='none')
          )
        )
        >>> replace_children(model, lambda m: isinstance(m, nn.GELU), lambda m: nn.ReLU(),
        ...                  unsupported=lambda m: m.approximate == 'none' and 'an exact erf',
        ...                  converter='to_relu')
        Traceback (most recent call last):
        ...
        ValueError: 0 (GELU) has an exact erf, which to_relu cannot convert (the model is unchanged)
    """
    found = children_matching(model, matches)
    for name, _, _, module in found:
        problem = unsupported(module)
        if problem:
            raise ValueError(f'{name} ({type(module).__name__}) has {problem}, which '
                             f'{converter} cannot convert (the model is unchanged)')
    converted = {}
    if in_turn:  # each place dropped from ``found`` once replaced: the original can go
        while found:
            _, parent, attr, module = found.pop(0)
            if id(module) not in converted:
                converted[id(module)] = convert(module)
            setattr(parent, attr, converted[id(module)])
        return model
    for _, _, _, module in found:
        if id(module) not in converted:
            converted[id(module)] = convert(module)
    for _, parent, attr, module in found:
        setattr(parent, attr, converted[id(module)])
    return model
