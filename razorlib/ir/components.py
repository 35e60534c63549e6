"""Registered components from config values: a name, a ``dict(type=...)`` or a built object.

The IR and quantization registries (:mod:`razorlib.registry`: passes, kernels, observers,
quantizers, dispatchers, exporters) are mmengine registries; these two helpers add what
they lack for razorlib's calls: an unknown key names the registry and lists its keys, and
one argument may be given as a name, a config dict or an object already built.

Example:
    >>> from razorlib.registry import GRAPH_PASSES
    >>> registered(GRAPH_PASSES, 'fuse_bn').__name__
    'FuseBatchNorm'
    >>> type(build_component(GRAPH_PASSES, dict(type='FuseBatchNorm'))).__name__
    'FuseBatchNorm'
    >>> registered(GRAPH_PASSES, 'fuse_everything')
    Traceback (most recent call last):
    ...
    KeyError: "no graph pass 'fuse_everything' in razorlib's registry; registered: ...
"""
from typing import Any, List, Mapping, Optional, Tuple

from mmengine.registry import Registry

__all__ = ['build_component', 'registered', 'registered_names', 'split_type']


def registered_names(registry: Registry) -> List[str]:
    """Every key of ``registry``, sorted, after importing the packages that fill it."""
    registry.import_from_location()
    return sorted(registry.module_dict)


def registered(registry: Registry, key: str) -> Any:
    """The class or function registered under ``key``.

    Args:
        registry: one of razorlib's registries.
        key: a registered name (a class name or an alias).

    Raises:
        TypeError: ``key`` is not a string.
        KeyError: nothing is registered under ``key``; the message lists what is.
    """
    if not isinstance(key, str):
        raise TypeError(f'a {registry.name} is named by a string, got {type(key).__name__} '
                        f'{key!r}')
    registry.import_from_location()
    found = registry.module_dict.get(key)
    if found is None and '.' in key:  # another scope's name: 'mmrazor.MyObserver'
        found = registry.get(key)
    if found is None:
        raise KeyError(f'no {registry.name} {key!r} in razorlib\'s registry; registered: '
                       f'{", ".join(registered_names(registry))}')
    return found


def split_type(spec: Any, parameter: str) -> Tuple[str, dict]:
    """``(type, options)`` of a name or a ``dict(type=..., **options)``.

    Raises:
        TypeError: ``spec`` is neither; the message names ``parameter``.
        KeyError: a dict without ``'type'``.

    Example:
        >>> split_type(dict(type='kl', bins=1024), 'observer')
        ('kl', {'bins': 1024})
    """
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, Mapping):
        options = dict(spec)
        if 'type' not in options:
            raise KeyError(f'{parameter}: a config dict needs a "type" key, got {options}')
        return options.pop('type'), options
    raise TypeError(f'{parameter} must be a registered name or a dict(type=...), got '
                    f'{type(spec).__name__} {spec!r}')


def build_component(registry: Registry, spec: Any, base: Optional[type] = None,
                    parameter: Optional[str] = None, **defaults: Any) -> Any:
    """Build ``spec`` from ``registry``, or take it as it is when it is built already.

    Args:
        registry: one of razorlib's registries.
        spec: a registered name, a ``dict(type=..., **options)``, or an instance of
            ``base`` (returned unchanged).
        base: the class built components derive from; None accepts no instance.
        parameter: the argument's name in error messages; the registry's name by default.
        **defaults: constructor arguments the options do not override.

    Returns:
        The component.
    """
    if base is not None and isinstance(spec, base):
        return spec
    kind, options = split_type(spec, parameter or registry.name)
    return registered(registry, kind)(**{**defaults, **options})
