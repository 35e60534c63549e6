"""Warnings that point at the user's line: the first frame outside razorlib and the
libraries that call into it (torch, mmengine, transformers).

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
import os
import sys
import warnings
from typing import Tuple, Type

__all__ = ['LIBRARY_PACKAGES', 'caller_stacklevel', 'warn_at_caller']

#: Top-level packages whose frames are not the user's: razorlib, and the libraries whose
#: code calls razorlib's (a module's forward hook, a runner's hook, a model's forward).
LIBRARY_PACKAGES = ('razorlib', 'torch', 'mmengine', 'transformers')


def _library_dirs() -> Tuple[str, ...]:
    """The directories of the imported :data:`LIBRARY_PACKAGES`, each ending in a
    separator (a package not imported has no frame on the stack)."""
    dirs = []
    for name in LIBRARY_PACKAGES:
        module = sys.modules.get(name)
        path = getattr(module, '__file__', None)
        if path:
            dirs.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return tuple(dirs)


def caller_stacklevel(skip: int = 1) -> int:
    """The ``stacklevel`` that makes ``warnings.warn``, called in the frame ``skip``
    levels above this function's, name the first frame outside the libraries (1: the
    frame that calls this function); the outermost frame when every one is inside."""
    frame = sys._getframe(skip)
    dirs = _library_dirs()
    level = 1
    while frame.f_back is not None and \
            os.path.abspath(frame.f_code.co_filename).startswith(dirs):
        frame = frame.f_back
        level += 1
    return level


def warn_at_caller(message: str, category: Type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside
    razorlib, torch, mmengine and transformers: the user's call (:func:`caller_stacklevel`).
    """
    warnings.warn(message, category, stacklevel=caller_stacklevel(2) + 1)
