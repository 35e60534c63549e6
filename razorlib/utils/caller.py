"""Warnings that point at the user's line: the first frame outside razorlib, the
libraries that call into it (torch, mmengine, transformers) and the standard library's
wrappers (``contextlib``, ``functools``).

A warning's ``stacklevel`` counted by hand goes stale as soon as a call path gains or
loses a frame, and one warning raised on two paths (``quantize_graph`` called by the user
and by ``quantize_torch_model``) cannot count right on both: the warning then names a
line inside razorlib, and Python's default filter shows it once per *that* line, not
once per line of the user's.  :func:`warn_at_caller` walks the stack instead (Python
3.12's ``skip_file_prefixes``, on 3.11).

Example:
    >>> import warnings
    >>> def library_call():  # defined here, outside the libraries: the warning names it
    ...     warn_at_caller('something to say')
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter('always')
    ...     library_call()
    >>> caught[0].message.args[0], caught[0].category.__name__
    ('something to say', 'UserWarning')
"""
import contextlib
import functools
import os
import sys
import warnings
from typing import Tuple, Type

__all__ = ['LIBRARY_PACKAGES', 'WRAPPER_MODULES', 'caller_stacklevel', 'warn_at_caller']

#: Top-level packages whose frames are not the user's: razorlib, and the libraries whose
#: code calls razorlib's (a module's forward hook, a runner's hook, a model's forward).
LIBRARY_PACKAGES = ('razorlib', 'torch', 'mmengine', 'transformers')


#: Standard-library modules whose frames stand between a library and its caller: a
#: ``@contextmanager``'s exit, a ``cached_property``.
WRAPPER_MODULES = (contextlib, functools)


def _library_files() -> Tuple[str, ...]:
    """The path prefixes of frames that are not the user's: the directories of the
    imported :data:`LIBRARY_PACKAGES`, each ending in a separator (a package not imported
    has no frame on the stack), and the files of :data:`WRAPPER_MODULES`."""
    prefixes = [os.path.abspath(module.__file__) for module in WRAPPER_MODULES]
    for name in LIBRARY_PACKAGES:
        module = sys.modules.get(name)
        path = getattr(module, '__file__', None)
        if path:
            prefixes.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return tuple(prefixes)


def caller_stacklevel(skip: int = 1) -> int:
    """The ``stacklevel`` that makes ``warnings.warn``, called in the frame ``skip``
    levels above this function's, name the first frame outside the libraries and
    wrappers (1: the frame that calls this function); the outermost frame when every one
    is inside."""
    frame = sys._getframe(skip)
    prefixes = _library_files()
    level = 1
    while frame.f_back is not None and \
            os.path.abspath(frame.f_code.co_filename).startswith(prefixes):
        frame = frame.f_back
        level += 1
    return level


def warn_at_caller(message: str, category: Type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside
    razorlib, torch, mmengine, transformers, ``contextlib`` and ``functools``: the user's
    call (:func:`caller_stacklevel`)."""
    warnings.warn(message, category, stacklevel=caller_stacklevel(2) + 1)
