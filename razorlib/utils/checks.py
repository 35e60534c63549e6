"""Checks of the numbers a config or a call gives (an observer's bins, a pass's target, a
number of calibration batches, a switch), so that a wrong one is refused by name up front,
and the keyword parameters a config dict may give a class (:func:`keyword_parameters`).

Without them a string compares with an int deep inside (``'<' not supported``), a float
count fails in ``itertools.islice`` after calibration, a bool passes as 0 or 1, and
``bool()`` reads the string ``'no'`` as True.  A value of the wrong type is a
``TypeError``, one of the right type out of range a ``ValueError``; both name the setting
and say what it holds.
"""
import difflib
import inspect
import math
import numbers
from typing import Any, Callable, List, Mapping, Optional, Sequence

import numpy as np

__all__ = ['check_options', 'integer_number', 'keyword_parameters', 'real_number', 'switch']


def _holds(wanted: str) -> str:
    return f' ({wanted})' if wanted else ''


def real_number(value: object, name: str, wanted: str = '') -> float:
    """``value`` as a float, refused when it is no real number or NaN.

    Args:
        value: what was given.
        name: the setting, for the message (``'MixedPrecision: max_drop'``).
        wanted: what it holds, for the message (``'a percentage'``).

    Raises:
        TypeError: ``value`` is no real number (a string, None, a bool).
        ValueError: ``value`` is NaN.

    Example:
        >>> real_number(99, 'percentile', 'a percentage')
        99.0
        >>> real_number('high', 'percentile', 'a percentage')
        Traceback (most recent call last):
        TypeError: percentile must be a number (a percentage), got 'high' (str)
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f'{name} must be a number{_holds(wanted)}, got {value!r} '
                        f'({type(value).__name__})')
    if math.isnan(value):
        raise ValueError(f'{name} must be a number{_holds(wanted)}, got nan')
    return float(value)


def integer_number(value: object, name: str, wanted: str = '',
                   minimum: Optional[int] = None) -> int:
    """``value`` as an int, refused when it is no integer or below ``minimum``.

    Args:
        value: what was given.
        name: the setting, for the message (``'calib_steps'``).
        wanted: what it holds, for the message (``'a number of bins'``).
        minimum: the smallest value allowed (None: any).

    Raises:
        TypeError: ``value`` is no integer (a float, even a whole one, a string, None, a
            bool).
        ValueError: ``value`` is below ``minimum``.

    Example:
        >>> integer_number(2048, 'bins', 'a number of bins')
        2048
        >>> integer_number(2048.0, 'bins', 'a number of bins')
        Traceback (most recent call last):
        TypeError: bins must be an integer (a number of bins), got 2048.0 (float)
        >>> integer_number(0, 'calib_steps', minimum=1)
        Traceback (most recent call last):
        ValueError: calib_steps must be at least 1, got 0
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f'{name} must be an integer{_holds(wanted)}, got {value!r} '
                        f'({type(value).__name__})')
    if minimum is not None and value < minimum:
        raise ValueError(f'{name} must be at least {minimum}, got {value}')
    return int(value)


def switch(value: object, name: str) -> bool:
    """``value``, refused unless it is True or False (a numpy bool too).

    ``bool(value)`` would read any non-empty string as True, so ``'no'`` or ``'False'``
    from a config or a command line would switch the setting on.

    Raises:
        TypeError: ``value`` is no bool.

    Example:
        >>> switch(False, 'global_ranking')
        False
        >>> switch('no', 'global_ranking')
        Traceback (most recent call last):
        TypeError: global_ranking must be True or False, got 'no' (str)
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f'{name} must be True or False, got {value!r} ({type(value).__name__})')
    return bool(value)


def check_options(target: Callable, options: Mapping[str, Any], parameter: str,
                  skip: Sequence[str] = (), through_bases: bool = False) -> None:
    """Refuse ``options`` that ``target``'s constructor (or the function) does not take,
    before anything is built: the constructor's own ``TypeError`` names no setting, and a
    base class's (``_Magnitude.__init__()``) not even the class the config names.

    Args:
        target: a class or a function, e.g. a registered observer class.
        options: the keyword arguments a config dict gives it.
        parameter: the setting's name in the message (``'ptq.observer'``).
        skip: parameters the caller sets itself, which no config may give.
        through_bases: follow a class's ``**kwargs`` up its bases
            (:func:`keyword_parameters`).

    Raises:
        TypeError: an option that is no keyword parameter of ``target`` (a ``**kwargs``
            target takes any); the message names the option, ``target`` and the options
            it takes, with the closest one.

    Example:
        >>> from razorlib.quantization import KLObserver
        >>> check_options(KLObserver, {'bins': 512}, 'observer')
        >>> check_options(KLObserver, {'binz': 512}, 'observer', skip=['channel_axis'])
        Traceback (most recent call last):
        ...
        TypeError: observer: KLObserver.__init__() got an unexpected keyword argument 'binz' \
(did you mean 'bins'?); KLObserver takes bins
    """
    parameters = keyword_parameters(target, through_bases)
    if parameters is None:  # **kwargs, or no signature to read: the target says
        return
    taken = [name for name in parameters if name not in skip]
    name = getattr(target, '__name__', repr(target))
    for key in options:
        if key in taken:
            continue
        # Python's own words (what building it would raise), then what it takes.
        if not taken:
            kind = 'options' if set(skip) & set(parameters) else 'arguments'
            raise TypeError(f'{parameter}: {name}() takes no {kind}, got option {key!r}')
        close = difflib.get_close_matches(str(key), taken, n=1)
        hint = f' (did you mean {close[0]!r}?)' if close else ''
        call = f'{name}.__init__()' if inspect.isclass(target) else f'{name}()'
        raise TypeError(f'{parameter}: {call} got an unexpected keyword argument {key!r}{hint}; '
                        f'{name} takes {", ".join(taken)}')


def keyword_parameters(target: Callable, through_bases: bool = False) -> Optional[List[str]]:
    """The names ``target`` (a class: its constructor; or a function) takes by keyword,
    in order; None when it takes any keyword (``**kwargs``) or has no signature to read.

    What a config dict may set besides ``type``: the config checks refuse other keys by
    name before anything is built, instead of the constructor's bare TypeError.  With
    ``through_bases`` a class's ``**kwargs`` are followed up the bases whose
    ``__init__`` passes them on (``ImportancePruner`` to ``StructurePruner``), to the
    first constructor that takes no ``**kwargs``.

    Example:
        >>> class Observer:
        ...     def __init__(self, bins=2048, *, channel_axis=None):
        ...         pass
        >>> class Kl(Observer):
        ...     def __init__(self, smooth=True, **kwargs):
        ...         super().__init__(**kwargs)
        >>> keyword_parameters(Observer), keyword_parameters(dict), keyword_parameters(Kl)
        (['bins', 'channel_axis'], None, None)
        >>> keyword_parameters(Kl, through_bases=True)
        ['smooth', 'bins', 'channel_axis']
    """
    inits = [vars(base)['__init__'] for base in target.__mro__ if '__init__' in vars(base)] \
        if through_bases and isinstance(target, type) else [target]
    names: List[str] = []
    for init in inits:
        try:
            parameters = list(inspect.signature(init).parameters.values())
        except (TypeError, ValueError):  # a builtin without a signature
            return None
        if init is not target:
            parameters = parameters[1:]  # self
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        names += [p.name for p in parameters if p.kind in kinds]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return names
    return None
