"""FixedSubnet: a chosen architecture as a YAML/JSON file of mutable name -> choice."""
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Hashable, List, Mapping, Tuple, Union

import yaml

from ..utils.files import atomic_write_text
from .mutables import Choice

PathLike = Union[str, Path]


class DuplicateKeyError(ValueError):
    """A mapping in a subnet file names one key twice."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a duplicate key: PyYAML keeps the last one
    silently, so an edited file could set another choice than the line one reads."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # the SafeLoader refuses it, naming it
            if key in seen:
                raise DuplicateKeyError(f'duplicate key {key!r} '
                                        f'(line {key_node.start_mark.line + 1})')
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _unique_pairs(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook`` refusing a duplicate key, as in YAML."""
    data: Dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise DuplicateKeyError(f'duplicate key {key!r}')
        data[key] = value
    return data


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
            ValueError: naming the file when it is missing or not a subnet mapping, or
                the key a mapping in it names twice.
        """
        path = Path(path)
        if not path.is_file():
            raise ValueError(f'{path}: subnet file does not exist')
        text = path.read_text()
        try:
            data = yaml.load(text, _UniqueKeyLoader) if path.suffix in ('.yaml', '.yml') \
                else json.loads(text, object_pairs_hook=_unique_pairs)
        except DuplicateKeyError as err:
            raise ValueError(f'{path}: {err}') from err
        except (yaml.YAMLError, json.JSONDecodeError) as err:
            raise ValueError(f'{path}: not a subnet file: {err}') from err
        return cls.from_dict(data or {}, where=str(path))
