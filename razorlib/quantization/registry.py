"""ClassRegistry: a dict from a key (a name, a platform) to a class, filled by a decorator.

Dispatchers, observers and quantizers each have one; a class registers under the value of
one of its class attributes, and a lookup of an unknown key says which keys are known.
"""
from typing import Any, Callable, Type, TypeVar

__all__ = ['ClassRegistry']

_Class = TypeVar('_Class', bound=type)


class ClassRegistry(dict):
    """A dict ``key -> class`` whose classes register themselves under a class attribute.

    Args:
        kind: what the classes are, for error messages (``'dispatcher'``).
        key_attribute: the class attribute holding a class's key (``'name'``).
        key_label: how to print a key in error messages; ``str`` by default.

    Example:
        >>> SHAPES = ClassRegistry('shape', 'name')
        >>> @SHAPES.register
        ... class Square:
        ...     name = 'square'
        >>> SHAPES.lookup('square').__name__
        'Square'
        >>> SHAPES.lookup('circle')
        Traceback (most recent call last):
        ...
        ValueError: unknown shape 'circle'; known shapes: square
    """

    def __init__(self, kind: str, key_attribute: str,
                 key_label: Callable[[Any], str] = str) -> None:
        super().__init__()
        self.kind = kind
        self.key_attribute = key_attribute
        self.key_label = key_label

    def register(self, cls: _Class) -> _Class:
        """Register ``cls`` under its key attribute; use as a class decorator.

        Raises:
            ValueError: another class holds the key already.
        """
        key = getattr(cls, self.key_attribute)
        if key in self and self[key] is not cls:
            raise ValueError(f'{self.kind} {self.key_label(key)!r} is registered already, by '
                             f'{self[key].__name__}; pick another {self.key_attribute}')
        self[key] = cls
        return cls

    def lookup(self, key: Any) -> Type:
        """The class registered under ``key``.

        Raises:
            ValueError: nothing is registered under ``key``; the message lists the keys.
        """
        if key not in self:
            known = ', '.join(sorted(self.key_label(known) for known in self))
            raise ValueError(f'unknown {self.kind} {self.key_label(key)!r}; known '
                             f'{self.kind}s: {known}')
        return self[key]
