"""FixedSubnet: a chosen architecture as a YAML/JSON file of mutable name -> choice."""
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Union

import yaml

from ..utils.files import atomic_write_text
from .mutables import Choice

PathLike = Union[str, Path]


@dataclass
class FixedSubnet:
    """The choice of each (active) mutable of a supernet: what a search exports and
    what :func:`~razorlib.nas.fix_subnet` builds a plain model from.

    The file is a flat mapping, readable and editable by hand::

        backbone.stages.0.0: shuffle_7x7
        backbone.stages.0.1: shuffle_xception

    Args:
        choices: mutable name -> choice (op name or number).

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / 'subnet.yaml'
        >>> FixedSubnet({'backbone.op': 'conv3x3', 'backbone.kernel': 5}).dump(path)
        >>> print(path.read_text().strip())
        backbone.op: conv3x3
        backbone.kernel: 5
        >>> FixedSubnet.load(path).choices
        {'backbone.op': 'conv3x3', 'backbone.kernel': 5}
    """
    choices: Dict[str, Choice] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Choice]:
        return dict(self.choices)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = 'subnet') -> 'FixedSubnet':
        if not isinstance(data, Mapping):
            raise ValueError(f'{where}: a subnet is a mapping of mutable name -> choice, '
                             f'got {type(data).__name__}')
        for key, value in data.items():
            if not isinstance(key, str) or not isinstance(value, (str, int, float)) \
                    or isinstance(value, bool):
                raise ValueError(f'{where}: {key!r}: a choice is an op name or a number, '
                                 f'got {value!r}')
        return cls(dict(data))

    def dump(self, path: PathLike) -> None:
        """Write as YAML (``.yaml``/``.yml``) or JSON (otherwise), atomically."""
        path = Path(path)
        if path.suffix in ('.yaml', '.yml'):
            text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        else:
            text = json.dumps(self.to_dict(), indent=1)
        atomic_write_text(path, text)

    @classmethod
    def load(cls, path: PathLike) -> 'FixedSubnet':
        """Read a file :meth:`dump` wrote (or one written by hand).

        Raises:
            ValueError: naming the file when it is missing or not a subnet mapping.
        """
        path = Path(path)
        if not path.is_file():
            raise ValueError(f'{path}: subnet file does not exist')
        text = path.read_text()
        try:
            data = yaml.safe_load(text) if path.suffix in ('.yaml', '.yml') else json.loads(text)
        except (yaml.YAMLError, json.JSONDecodeError) as err:
            raise ValueError(f'{path}: not a subnet file: {err}') from err
        return cls.from_dict(data or {}, where=str(path))
