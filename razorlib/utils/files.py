"""Writing files so that an interrupted write never leaves a half-written one behind."""
import os
import tempfile
from pathlib import Path
from typing import Union


def atomic_write_text(path: Union[str, Path], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a kill leaves the old file.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / 'sub' / 'out.json'
        >>> atomic_write_text(target, '{}')
        >>> target.read_text(), [p.name for p in target.parent.iterdir()]
        ('{}', ['out.json'])
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.')
    try:
        with os.fdopen(fd, 'w') as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
