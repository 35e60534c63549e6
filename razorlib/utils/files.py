"""Writing files so that an interrupted write never leaves a half-written one behind."""
import os
import secrets
from pathlib import Path
from typing import Tuple, Union

#: Attempts at a fresh temporary name before giving up (each collision is a 2**-64 event).
_ATTEMPTS = 16


def atomic_write_text(path: Union[str, Path], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a kill leaves the old file.

    The file gets the mode ``open(path, 'w')`` would give it (``0o666`` less the umask,
    e.g. ``0o644``), like the checkpoints and logs beside it: the temporary file is
    created with ``os.open(..., 0o666)``, not ``tempfile.mkstemp``, whose files are
    ``0o600`` whatever the umask.

    Example:
        >>> import stat, tempfile
        >>> target = Path(tempfile.mkdtemp()) / 'sub' / 'out.json'
        >>> old = os.umask(0o022)
        >>> atomic_write_text(target, '{}')
        >>> _ = os.umask(old)
        >>> target.read_text(), [p.name for p in target.parent.iterdir()]
        ('{}', ['out.json'])
        >>> oct(stat.S_IMODE(target.stat().st_mode))
        '0o644'
    """
    path = Path(path)
    if path.is_symlink():  # write where it points, as open(path, 'w') would, not over it
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, fd = _create_temporary(path)
    try:
        with os.fdopen(fd, 'w') as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _create_temporary(path: Path) -> Tuple[Path, int]:
    """A new hidden file beside ``path``, opened for writing: ``(its path, descriptor)``."""
    for _ in range(_ATTEMPTS):
        tmp = path.with_name(f'.{path.name}.{secrets.token_hex(8)}.tmp')
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f'{path.parent}: no free temporary name for {path.name} after '
                          f'{_ATTEMPTS} attempts; remove the stale .{path.name}.*.tmp files')
