"""ChannelConfig: which channels of which modules a subnet keeps; JSON/YAML round trip.

This is what ``export_subnet`` returns and ``deploy_subnet`` consumes.  It names modules
and parameters and lists kept channel indices, so it slims a freshly built model of the
same architecture without tracing it again.

File layout (YAML shown; JSON has the same keys)::

    version: 1
    modules:
      layer1.0.conv1: {in_channels: 64, out_channels: 32, raw_in_channels: 64,
                       raw_out_channels: 64, out_index: [0, 5, 6, ...]}
      layer1.0.bn1: {out_channels: 32, raw_out_channels: 64, out_index: [0, 5, 6, ...]}
    params:
      blocks.0.gamma: [{dim: 0, channels: 32, raw_channels: 64, index: [...]}]

An ``*_index`` key is left out when every channel is kept.
"""
import json
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import yaml

from ..utils.files import atomic_write_text

FORMAT_VERSION = 1


@dataclass(frozen=True)
class ChannelSelection:
    """Kept channel indices (ascending) out of ``raw`` channels."""
    raw: int
    index: tuple

    def __post_init__(self):
        index = tuple(int(i) for i in self.index)
        if not index:
            raise ValueError('a channel selection must keep at least one channel')
        if list(index) != sorted(set(index)) or index[0] < 0 or index[-1] >= self.raw:
            raise ValueError(f'channel indices must be ascending, unique and within '
                             f'[0, {self.raw}), got {list(index)[:8]}...')
        object.__setattr__(self, 'index', index)

    @classmethod
    def full(cls, raw: int) -> 'ChannelSelection':
        return cls(raw, tuple(range(raw)))

    @property
    def count(self) -> int:
        return len(self.index)

    @property
    def is_full(self) -> bool:
        return self.count == self.raw


@dataclass
class ChannelConfig:
    """Channels a subnet keeps, per module axis (``in``/``out``) and per parameter dim.

    Example:
        >>> cfg = ChannelConfig({'conv': {'out': ChannelSelection(8, (0, 2, 5))}})
        >>> ChannelConfig.from_dict(cfg.to_dict()) == cfg
        True
        >>> cfg.to_dict()['modules']['conv']['out_channels']
        3
    """
    modules: Dict[str, Dict[str, ChannelSelection]] = field(default_factory=dict)
    params: Dict[str, Dict[int, ChannelSelection]] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        modules = {}
        for name, axes in self.modules.items():
            entry: Dict[str, Any] = {}
            for axis in ('in', 'out'):
                if axis in axes:
                    sel = axes[axis]
                    entry[f'{axis}_channels'] = sel.count
                    entry[f'raw_{axis}_channels'] = sel.raw
                    if not sel.is_full:
                        entry[f'{axis}_index'] = list(sel.index)
            modules[name] = entry
        params = {}
        for name, dims in self.params.items():
            params[name] = [dict(dim=dim, channels=sel.count, raw_channels=sel.raw,
                                 **({} if sel.is_full else {'index': list(sel.index)}))
                            for dim, sel in sorted(dims.items())]
        return {'version': FORMAT_VERSION, 'modules': modules, 'params': params}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> 'ChannelConfig':
        if not isinstance(data, dict) or 'modules' not in data:
            raise ValueError("a channel config is a mapping with a 'modules' key")
        if data.get('version', FORMAT_VERSION) != FORMAT_VERSION:
            raise ValueError(f"unsupported channel config version {data.get('version')!r}")
        unknown = set(data) - {'version', 'modules', 'params'}
        if unknown:
            raise ValueError(f"unknown top-level keys {sorted(unknown)}; a channel config has "
                             "'version', 'modules' and 'params'")
        modules = {}
        for name, entry in _mapping(data['modules'], 'modules').items():
            entry = _mapping(entry, f'modules.{name}')
            axes = {}
            for axis in ('in', 'out'):
                keys = (f'{axis}_channels', f'raw_{axis}_channels', f'{axis}_index')
                if any(key in entry for key in keys):
                    axes[axis] = _selection(entry, f'modules.{name}', f'{axis}_channels',
                                            f'raw_{axis}_channels', f'{axis}_index')
            unknown = set(entry) - {f'{a}_{k}' for a in ('in', 'out')
                                    for k in ('channels', 'index')} \
                - {'raw_in_channels', 'raw_out_channels'}
            if unknown:
                raise ValueError(f'modules.{name}: unknown keys {sorted(unknown)}')
            modules[name] = axes
        params = {}
        for name, dims in _mapping(data.get('params') or {}, 'params').items():
            params[name] = {}
            if not isinstance(dims, list):
                raise ValueError(f'params.{name}: a list of dims, got {type(dims).__name__}')
            for i, entry in enumerate(dims):
                where = f'params.{name}[{i}]'
                if 'dim' not in _mapping(entry, where):
                    raise ValueError(f"{where}: missing key 'dim'")
                params[name][_integer(entry['dim'], f'{where}.dim')] = _selection(
                    entry, where, 'channels', 'raw_channels', 'index')
        return cls(modules, params)

    def dump(self, path: Union[str, Path]) -> None:
        """Write as YAML (``.yaml``/``.yml``) or JSON (otherwise), atomically."""
        path = Path(path)
        data = self.to_dict()
        if path.suffix in ('.yaml', '.yml'):
            text = yaml.safe_dump(data, default_flow_style=None, sort_keys=False, width=100)
        else:
            text = json.dumps(data, indent=1)
        atomic_write_text(path, text)

    @classmethod
    def load(cls, path: Union[str, Path]) -> 'ChannelConfig':
        """Read a file :meth:`dump` wrote.

        Raises:
            FileNotFoundError: no such file, with the steps that write one (a config
                names the file before the run that writes it has been made).
            ValueError: not a channel config, naming the file and the key at fault.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f'channel config {path} does not exist; a pruning run '
                                    '(tools/train.py) or tools/prune.py writes slim.yaml in '
                                    'its work dir, tools/search.py subnet.yaml: run that step '
                                    'first, or name the file it wrote')
        text = path.read_text()
        try:
            data = yaml.safe_load(text) if path.suffix in ('.yaml', '.yml') else json.loads(text)
        except (yaml.YAMLError, json.JSONDecodeError) as err:
            raise ValueError(f'{path}: not a valid channel config file: {err}') from err
        try:
            return cls.from_dict(data)
        except ValueError as err:
            raise ValueError(f'{path}: {err}') from err

    def kept(self, name: str, axis: str) -> Optional[ChannelSelection]:
        return self.modules.get(name, {}).get(axis)

    def summary(self) -> List[str]:
        """One line per pruned module: ``name: in a->b, out c->d``."""
        lines = []
        for name, axes in self.modules.items():
            parts = [f'{axis} {sel.raw}->{sel.count}' for axis, sel in axes.items()
                     if not sel.is_full]
            if parts:
                lines.append(f"{name}: {', '.join(parts)}")
        return lines


def _mapping(value: Any, where: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f'{where}: a mapping, got {type(value).__name__} {value!r:.40}')
    return value


def _integer(value: Any, where: str) -> int:
    """``value`` if it is an integer (not a bool, a string or a fraction), else an error
    naming the key: ``'8'`` or ``0.5`` in a file is a mistake, not a width."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f'{where}: an integer, got {value!r}')
    return int(value)


def _selection(entry: Dict[str, Any], where: str, count_key: str, raw_key: str,
               index_key: str) -> ChannelSelection:
    for key in (count_key, raw_key):
        if key not in entry:
            raise ValueError(f'{where}: missing key {key!r}')
    count = _integer(entry[count_key], f'{where}.{count_key}')
    raw = _integer(entry[raw_key], f'{where}.{raw_key}')
    index = entry.get(index_key, list(range(raw)))
    if not isinstance(index, (list, tuple)):
        raise ValueError(f'{where}.{index_key}: a list of channel indices, got '
                         f'{type(index).__name__}')
    index = [_integer(i, f'{where}.{index_key}') for i in index]
    try:
        selection = ChannelSelection(raw, tuple(index))
    except (TypeError, ValueError) as err:
        raise ValueError(f'{where}.{index_key}: {err}') from err
    if selection.count != count:
        raise ValueError(f'{where}: {count_key}={count} but {index_key} lists '
                         f'{selection.count} channels')
    return selection


def as_channel_config(cfg: Union['ChannelConfig', Dict[str, Any], str, Path]) -> ChannelConfig:
    """Accept a ChannelConfig, its dict form, or a path to a JSON/YAML file."""
    if isinstance(cfg, ChannelConfig):
        return cfg
    if isinstance(cfg, (str, Path)):
        return ChannelConfig.load(cfg)
    return ChannelConfig.from_dict(cfg)
