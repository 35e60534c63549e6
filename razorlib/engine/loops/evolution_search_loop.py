"""EvolutionSearchLoop: evolve subnets of a trained supernet under FLOPs/params limits."""
import hashlib
import json
import numbers
import random
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple, Union

from ...registry import LOOPS
from ...utils.complexity import human
from ..config import ConfigError, check_integers
from .base_search_loop import BaseSearchLoop
from .results import SearchResult, SubnetRecord
from .search_state import SearchState
from .width_space import Widths

CONSTRAINT_KEYS = ('flops', 'params')
#: The key of the saved state's settings that records the supernet checkpoint.
CHECKPOINT_KEY = 'checkpoint'
#: The checkpoint of a state saved before checkpoints were recorded: matches none.
UNRECORDED: Dict[str, Any] = {}
Fingerprint = Optional[Dict[str, Any]]


def checkpoint_fingerprint(path: Optional[str]) -> Fingerprint:
    """``{'path', 'size', 'sha256'}`` of a local checkpoint file (``{'path'}`` alone of a
    remote one, ``None`` for none): what tells two checkpoints apart, so that a resumed
    search never scores with another one than the candidates it continues.  The whole
    file is hashed: the first megabytes of two epochs of one run can be the same, and
    reading a checkpoint once costs little next to a search."""
    if path is None:
        return None
    file = Path(path)
    if not file.is_file():
        return dict(path=str(path))
    digest = hashlib.sha256()
    with file.open('rb') as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b''):
            digest.update(chunk)
    return dict(path=str(file.resolve()), size=file.stat().st_size, sha256=digest.hexdigest())


def config_digest(cfg: Any) -> Optional[str]:
    """``'sha256:<16 hex>'`` of a dataloader config (its keys sorted; a class or function
    in it by its qualified name, which unlike its repr is the same in every process),
    or None for a dataloader given built: it has no config to tell it apart by."""
    if not isinstance(cfg, Mapping):
        return None
    text = json.dumps(cfg, sort_keys=True, default=lambda obj: '.'.join(
        (getattr(obj, '__module__', None) or type(obj).__module__,
         getattr(obj, '__qualname__', type(obj).__qualname__))))
    return 'sha256:' + hashlib.sha256(text.encode()).hexdigest()[:16]


def same_checkpoint(saved: Fingerprint, current: Fingerprint) -> bool:
    """Whether two fingerprints name one checkpoint: the same contents wherever it now
    lies, or the same path for a file that could not be hashed."""
    def identity(fingerprint: Fingerprint) -> Fingerprint:
        if fingerprint is None:
            return None
        return {k: v for k, v in fingerprint.items() if k != 'path'} or fingerprint

    return saved is not UNRECORDED and identity(saved) == identity(current)


def describe(fingerprint: Fingerprint) -> str:
    """A checkpoint's fingerprint for a message: its path, size and hash prefix."""
    if fingerprint is None:
        return 'none (no load_from)'
    if fingerprint is UNRECORDED:
        return 'not recorded (a state saved before checkpoints were)'
    if 'sha256' not in fingerprint:
        return fingerprint['path']
    return f"{fingerprint['path']} ({fingerprint['size']} bytes, sha256 " \
        f"{fingerprint['sha256'][:12]}...)"


@LOOPS.register_module()
class EvolutionSearchLoop(BaseSearchLoop):
    """Evolutionary search over per-space widths, as in mmrazor's loop of that name.

    Generation 0 is ``num_candidates`` random subnets.  Each generation scores its new
    candidates (BatchNorm recalibrated, then validated) and keeps the ``top_k`` best
    subnets seen so far; the next generation is ``num_mutation`` mutants of them (each
    space redrawn with ``mutate_prob``), ``num_crossover`` crossovers of two of them,
    and random subnets up to ``num_candidates``.  Every candidate meets
    ``constraints`` (drawn again until it does) and none repeats a scored subnet; when
    the draws find no new one for a generation (the space within the constraints is
    spent, or nearly), the search ends there rather than run empty generations.

    After each generation the state (generation, next population, every score, the
    random generator, and the settings with the supernet checkpoint the runner loads,
    ``load_from``: path, size and SHA-256) goes to ``work_dir/search_state.json``,
    atomically, and the hooks' ``after_search_step(step=generation, best=...)`` is
    called; a search started with ``resume_from`` set to that file continues with the
    next generation and ends exactly as an uninterrupted one would.  A resume with other
    settings, other data (the settings hold digests of the scoring and recalibration
    dataloaders' configs, :meth:`data_digests`) or another checkpoint is refused: its
    scores would not compare with the saved ones.  Every random draw comes from the loop's own
    ``random.Random(seed)`` (``self.rng``), never from the global generators.  The best
    subnet is chosen as ``'best_subnet'`` (``DumpSubnetHook`` writes
    ``best_subnet.yaml``).

    Args:
        runner: the mmengine runner.
        dataloader: the data candidates are scored on, or its config.
        evaluator: the evaluator or its config.
        max_epochs: generations to run.
        num_candidates: population size.
        top_k: how many of the best subnets parent the next generation.
        num_mutation: mutants per generation.
        num_crossover: crossovers per generation.
        mutate_prob: the chance that a mutation redraws a space.
        constraints: upper limits, ``dict(flops=..., params=...)`` (either or both).
        resume_from: a ``search_state.json`` to continue from.
        max_trials: draws allowed per candidate before a generation is left short.
        **kwargs: ``recalib_batches``, ``val_batches``, ``calib_dataloader``, ``score_key``,
            ``score_rule``, ``tie_break_key`` and ``seed`` (also the search's seed) of
            :class:`BaseSearchLoop`.

    Example:
        >>> search_cfg = dict(type='EvolutionSearchLoop', max_epochs=10, num_candidates=20,
        ...                   top_k=5, num_mutation=8, num_crossover=8, mutate_prob=0.2,
        ...                   constraints=dict(flops=100e6), recalib_batches=8)
    """

    def __init__(self, runner, dataloader, evaluator, max_epochs: int = 20,
                 num_candidates: int = 50, top_k: int = 10, num_mutation: int = 25,
                 num_crossover: int = 25, mutate_prob: float = 0.1,
                 constraints: Optional[Dict[str, float]] = None,
                 resume_from: Union[str, Path, None] = None, max_trials: int = 100, **kwargs):
        super().__init__(runner, dataloader, evaluator, **kwargs)
        self._data_cfgs = dict(val_data=dataloader, calib_data=kwargs.get('calib_dataloader'))
        self.constraints = self._check_constraints(constraints or {})
        check_integers(max_epochs=max_epochs, num_candidates=num_candidates, top_k=top_k,
                       num_mutation=num_mutation, num_crossover=num_crossover,
                       max_trials=max_trials)
        if isinstance(mutate_prob, bool) or not isinstance(mutate_prob, numbers.Real):
            raise ConfigError(f'mutate_prob must be a number in [0, 1], got {mutate_prob!r}')
        rules = [('max_epochs', max_epochs, max_epochs >= 1, '>= 1'),
                 ('num_candidates', num_candidates, num_candidates >= 1, '>= 1'),
                 ('top_k', top_k, 1 <= top_k <= num_candidates, 'in [1, num_candidates]'),
                 ('num_crossover', num_crossover, num_crossover >= 0, '>= 0'),
                 ('num_mutation', num_mutation,
                  0 <= num_mutation <= num_candidates - num_crossover,
                  'in [0, num_candidates - num_crossover]'),
                 ('top_k', top_k, num_crossover == 0 or top_k >= 2,
                  '>= 2 when num_crossover > 0'),
                 ('mutate_prob', mutate_prob, 0 <= mutate_prob <= 1, 'in [0, 1]'),
                 ('max_trials', max_trials, max_trials >= 1, '>= 1')]
        for key, value, ok, rule in rules:
            if not ok:
                raise ConfigError(f'{key} must be {rule}, got {value!r}')
        self.max_epochs, self.num_candidates, self.top_k = max_epochs, num_candidates, top_k
        self.num_mutation, self.num_crossover = num_mutation, num_crossover
        self.mutate_prob, self.max_trials = mutate_prob, max_trials
        self.resume_from = resume_from
        self.state_path = Path(runner.work_dir) / 'search_state.json'
        self.rng = random.Random(self.seed)

    @staticmethod
    def _check_constraints(constraints: Mapping[str, float]) -> Dict[str, float]:
        """The limits as floats, each a known key and a positive number: a bool (True is a
        1.0 limit, which no subnet meets) and NaN (no subnet compares below it) are
        refused, as every subnet would be excluded for a typo.

        Raises:
            ConfigError: naming ``constraints.<key>``.
        """
        if not isinstance(constraints, Mapping):
            raise ConfigError(f'constraints must be a dict of limits {CONSTRAINT_KEYS}, got '
                              f'{constraints!r}')
        for key, value in constraints.items():
            if key not in CONSTRAINT_KEYS:
                raise ConfigError(f'constraints.{key}: unknown constraint; use {CONSTRAINT_KEYS}')
            if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or not value > 0:
                raise ConfigError(f'constraints.{key} must be a positive number, got {value!r}')
        return {key: float(value) for key, value in constraints.items()}

    def settings(self) -> Dict[str, object]:
        """What a resumed search must share with the saved one (JSON types)."""
        return json.loads(json.dumps(dict(
            num_candidates=self.num_candidates, top_k=self.top_k,
            num_mutation=self.num_mutation, num_crossover=self.num_crossover,
            mutate_prob=self.mutate_prob, constraints=self.constraints, seed=self.seed,
            score_key=self.score_key, score_rule=self.score_rule,
            tie_break_key=self.tie_break_key, max_trials=self.max_trials,
            fp16=bool(self.scorer.fp16), recalib_batches=self.recalib_batches,
            val_batches=self.val_batches, spaces=self.space.choices, **self.data_digests())))

    def data_digests(self) -> Dict[str, Optional[str]]:
        """:func:`config_digest` of the config of the data candidates are scored on
        (``val_data``) and of the BatchNorm recalibration data (``calib_data``: the
        loop's ``calib_dataloader``, else the runner's ``train_dataloader``, the config
        mmengine keeps in ``runner._train_dataloader``): scores on other data, or
        recalibrated on other batches, do not compare with the saved ones."""
        calib = self._data_cfgs['calib_data']
        if calib is None:
            calib = getattr(self.runner, '_train_dataloader', None)
        return dict(val_data=config_digest(self._data_cfgs['val_data']),
                    calib_data=config_digest(calib))

    def feasible(self, widths: Widths) -> bool:
        """Whether the subnet meets every constraint."""
        flops, params = self.measure(widths)
        return all(value <= self.constraints[key]
                   for key, value in (('flops', flops), ('params', params))
                   if key in self.constraints)

    def draw(self, make: Callable[[], Widths], count: int, taken: Set[Tuple[int, ...]]
             ) -> List[Widths]:
        """Up to ``count`` new feasible subnets from ``make``; their keys join ``taken``."""
        drawn: List[Widths] = []
        for _ in range(count * self.max_trials):
            if len(drawn) == count:
                break
            widths = make()
            key = self.space.key(widths)
            if key not in taken and self.feasible(widths):
                taken.add(key)
                drawn.append(widths)
        if len(drawn) < count:
            self.runner.logger.warning(f'found {len(drawn)} of {count} new subnets within the '
                                       f'constraints in {count * self.max_trials} draws')
        return drawn

    def next_population(self, top: List[SubnetRecord]) -> List[Widths]:
        """Mutants and crossovers of ``top``, then random subnets, all new and feasible."""
        taken = {self.space.key(r.widths) for r in self.records}
        parents = [r.widths for r in top]
        population = self.draw(lambda: self.space.mutate(self.rng.choice(parents),
                                                         self.mutate_prob, self.rng),
                               self.num_mutation, taken)
        if len(parents) >= 2:  # top_k >= 2 is checked, but a first generation may be short
            population += self.draw(lambda: self.space.crossover(*self.rng.sample(parents, 2),
                                                                 self.rng),
                                    self.num_crossover, taken)
        return population + self.draw(lambda: self.space.sample(self.rng),
                                      self.num_candidates - len(population), taken)

    def best(self) -> List[SubnetRecord]:
        """The ``top_k`` best records so far: best score (``score_rule``; then the lower
        tie-break metric), then fewest FLOPs."""
        return sorted(self.records,
                      key=lambda r: (tuple(-v for v in self.rank(r)), r.flops))[:self.top_k]

    def check_checkpoint(self, saved: Fingerprint, current: Fingerprint) -> None:
        """Raise unless the saved search scored with the checkpoint loaded now.

        Raises:
            ConfigError: naming both checkpoints.
        """
        if not same_checkpoint(saved, current):
            raise ConfigError(
                f'resume_from: {self.resume_from}: cannot resume: the checkpoint is '
                f'{describe(saved)} in the saved search but {describe(current)} now; resume '
                'with the saved one, or start a new search')

    def cheapest(self, measure: int) -> Widths:
        """The subnet of fewest FLOPs (``measure`` 0) or params (1): the space's own
        ``cheapest`` where it has one (a NAS space: an op's first choice, fewest
        parameters at full inner width, need not cost least), else every decision at
        its first choice (a width space's narrowest)."""
        minimise = getattr(self.space, 'cheapest', None)
        if minimise is None:
            return {gid: choices[0] for gid, choices in self.space.choices.items()}
        return minimise(lambda candidate: self.measure(candidate)[measure])

    def check_reachable(self) -> None:
        """Refuse, before any candidate is scored, a limit below the fewest FLOPs (or
        params) of any subnet.  Each limit is checked alone: limits that only different
        subnets meet pass here, and the search ends finding no subnet to score.

        Raises:
            ConfigError: naming the constraint, its limit and the least reachable value.
        """
        for measure, key in enumerate(CONSTRAINT_KEYS):
            if key not in self.constraints:
                continue
            least = self.measure(self.cheapest(measure))[measure]
            if least > self.constraints[key]:
                raise ConfigError(
                    f'constraints: {self.constraints} exclude even the narrowest subnet: '
                    f'{key} <= {human(self.constraints[key])}, but the fewest {key} of any '
                    f'subnet are {human(least)}')

    def start(self) -> SearchState:
        """A fresh search's state, or the saved one of ``resume_from``; either records
        the checkpoint the runner loads."""
        checkpoint = checkpoint_fingerprint(self.runner.cfg.get('load_from'))
        if self.resume_from is not None:
            try:
                state = SearchState.load(self.resume_from)
                saved = state.settings.pop(CHECKPOINT_KEY, UNRECORDED)
                state.check_settings(self.settings(), self.resume_from)
            except (OSError, ValueError) as err:
                raise ConfigError(f'resume_from: {err}') from err
            self.check_checkpoint(saved, checkpoint)
            state.settings[CHECKPOINT_KEY] = checkpoint  # where it lies now
            self.records = list(state.records)
            self.rng.setstate(state.rng)
            self.runner.logger.info(f'resumed {self.resume_from} at generation '
                                    f'{state.generation}')
            return state
        self.check_reachable()
        population = self.draw(lambda: self.space.sample(self.rng), self.num_candidates, set())
        return SearchState(0, {**self.settings(), CHECKPOINT_KEY: checkpoint}, population, [],
                           self.rng.getstate(), [])

    def search(self) -> SearchResult:
        """Evolve for ``max_epochs`` generations; return every record and the best."""
        state = self.start()
        for generation in range(state.generation, self.max_epochs):
            if not state.population:
                if not self.records:
                    raise ConfigError(f'constraints: {self.constraints}: no subnet within '
                                      'them was found to score')
                self.runner.logger.warning(
                    f'generation {generation}: the draws found no new subnet within the '
                    f'constraints ({len(self.records)} scored); the search ends here, '
                    f'{self.max_epochs - generation} of {self.max_epochs} generations unrun')
                break
            for widths in state.population:
                self.records.append(self.evaluate(widths, f'generation {generation}'))
            top = self.best()
            self.runner.logger.info(
                f'generation {generation}: best {self.score_key} {top[0].score:.4g} at FLOPs '
                f'{human(top[0].flops)}; top {len(top)} from {len(self.records)} subnets')
            state = SearchState(generation + 1, state.settings, self.next_population(top),
                                list(self.records), self.rng.getstate(),
                                state.best + [self.records.index(top[0])])
            state.dump(self.state_path)
            self.runner.call_hook('after_search_step', step=generation, best=top[0])
        return self.result({'best_subnet': self.best()[0]},
                           [self.records[i] for i in state.best],
                           {'best_subnet': dict(self.constraints)})
