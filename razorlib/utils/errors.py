"""An error's message cut to what fits in another one: razorlib re-raises the errors of
the code it runs (a model's forward, an exporter, ``torch.load``) inside messages of its
own that name the module, batch or file at fault, and those stay one line.

Example:
    >>> err = RuntimeError('\\nArguments for call are not valid.\\n  File "net.py", line 9')
    >>> first_line(err)  # TorchScript's messages start with a newline
    'RuntimeError: Arguments for call are not valid.'
"""
from typing import Optional

__all__ = ['first_line']


def first_line(err: BaseException, limit: Optional[int] = 300, with_type: bool = True) -> str:
    """``Type: message``, the message's first non-blank line only (the type alone when it
    is blank).

    Exporters append whole graphs to their messages, and TorchScript starts its with a
    newline, so neither the whole message nor ``str(err).splitlines()[0]`` fits in one
    line of another message.

    Args:
        err: the error.
        limit: the most characters returned (a longer line is cut, ending with
            ``...``); None: no limit.
        with_type: start with the type's name; False: the message's line alone (still
            the type's name when the message is blank), for a message whose own words
            already say what failed.

    Example:
        >>> first_line(ValueError('shapes differ\\n<the whole graph>'))
        'ValueError: shapes differ'
        >>> first_line(KeyError('fc.weight')), first_line(ValueError())
        ("KeyError: 'fc.weight'", 'ValueError')
        >>> first_line(OSError('x' * 50), limit=20)
        'OSError: xxxxxxxx...'
        >>> first_line(ValueError('mask of 3 channels\\nfor 4'), with_type=False)
        'mask of 3 channels'
    """
    message = str(err).strip()
    if not message:
        line = type(err).__name__
    else:
        line = message.splitlines()[0]
        line = f'{type(err).__name__}: {line}' if with_type else line
    return line if limit is None or len(line) <= limit else line[:limit - 3] + '...'
