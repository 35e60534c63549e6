"""The checkpoint of an evolution search: plain JSON, written atomically each generation."""
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Union

from ...utils.files import atomic_write_text
from .results import SubnetRecord
from .width_space import Widths

STATE_VERSION = 1


@dataclass
class SearchState:
    """Where an evolution search stands after a generation.

    Args:
        generation: generations completed; the next one to run.
        settings: the search settings and space sizes, to refuse resuming another search.
        population: the candidates of generation ``generation``, not yet scored.
        records: every subnet scored so far, in order.
        rng: the state of the search's ``random.Random``.
        best: per completed generation, the index in ``records`` of the best subnet so far.

    Example:
        >>> import random
        >>> rng = random.Random(0)
        >>> state = SearchState(1, {'top_k': 2}, [{'conv': 4}], [], rng.getstate(), [])
        >>> SearchState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
        True
    """
    generation: int
    settings: Dict[str, Any]
    population: List[Widths]
    records: List[SubnetRecord]
    rng: tuple
    best: List[int]

    def to_dict(self) -> Dict[str, Any]:
        version, internal, gauss = self.rng
        return dict(version=STATE_VERSION, generation=self.generation, settings=self.settings,
                    population=self.population,
                    records=[record.to_dict() for record in self.records],
                    rng=[version, list(internal), gauss], best=self.best)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> 'SearchState':
        if data.get('version') != STATE_VERSION:
            raise ValueError(f"unsupported search state version {data.get('version')!r}")
        version, internal, gauss = data['rng']
        return cls(int(data['generation']), data['settings'], data['population'],
                   [SubnetRecord.from_dict(r) for r in data['records']],
                   (version, tuple(internal), gauss), [int(i) for i in data['best']])

    def dump(self, path: Union[str, Path]) -> None:
        atomic_write_text(path, json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: Union[str, Path]) -> 'SearchState':
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f'{path}: not a search state file: {err!r}') from err

    def check_settings(self, settings: Dict[str, Any], path: Union[str, Path]) -> None:
        """Raise if ``settings`` differ from the saved ones, naming the first key."""
        for key in sorted(set(settings) | set(self.settings)):
            if settings.get(key) != self.settings.get(key):
                raise ValueError(f'{path}: cannot resume: {key} is {self.settings.get(key)!r} '
                                 f'in the saved search but {settings.get(key)!r} now')
