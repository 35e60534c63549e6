"""BaseSearchLoop: what every search loop shares; set a subnet, recalibrate, score it."""
import math
from typing import Any, Dict, List, Optional, Tuple, Union

from mmengine.evaluator import Evaluator
from mmengine.model import BaseModel
from mmengine.runner import BaseLoop

from ...pruning import ChannelConfig
from ...utils.complexity import human
from ..config import ConfigError, check_integers
from ..utils import unwrap
from .results import SCORE_RULES, SearchResult, SubnetRecord
from .subnet_val_loop import LoaderOrCfg, SubnetValLoop, refuse_ema_swapping_masks
from .width_space import SearchSpace, Widths, WidthSpace


def worst_if_nan(value: float) -> float:
    """``value``, or ``-inf`` for NaN: what ranks below every number (higher is better)."""
    return -math.inf if math.isnan(value) else value


class BaseSearchLoop(BaseLoop):
    """Scores subnets of the runner's AutoSlim supernet; subclasses implement ``search``.

    The model (``runner.model``, unwrapped from DDP) must have ``.pruner``,
    ``set_subnet(dict)``, ``export_subnet()``, ``flops_params()`` (a
    :class:`~razorlib.utils.Complexity`) and ``val_step``, as ``AutoSlim`` has.
    Everything that reads the model happens in ``run``, after the runner has loaded
    the checkpoint.

    A candidate is scored by a :class:`SubnetValLoop` (``self.scorer``) on the loop's
    dataloader and evaluator: BatchNorm recalibrated, then mmengine's validation
    iterations and hook stages.  :meth:`run` calls the search stages of
    :class:`~razorlib.engine.hooks.SearchHook` around :meth:`search`; nothing is
    written by the loop itself but the evolution's resumable state:
    :class:`~razorlib.engine.hooks.DumpSubnetHook` writes the chosen subnets and the
    results JSON at ``after_search``.

    The candidates are the members of a search space (:meth:`build_space`): the
    model's ``search_space`` when it has one (a NAS supernet's op and value choices,
    ``razorlib.nas.NasMutator``), else its pruner's :class:`WidthSpace`; any object of
    the :class:`SearchSpace` interface plugs in.

    Args:
        runner: the mmengine runner.
        dataloader: the data subnets are scored on, or its config.
        evaluator: the evaluator or its config, e.g. ``dict(type='Accuracy', topk=1)``.
        recalib_batches: training batches for BatchNorm recalibration before each
            evaluation; 0 keeps the supernet's statistics.
        val_batches: score on the first ``val_batches`` batches only (give the loader a
            seeded shuffling sampler so they are a fixed random subset); None: all.
        calib_dataloader: the recalibration data or its config; default the runner's
            training dataloader.
        score_key: the metric subnets are ranked by.
        score_rule: ``'greater'`` (the default: accuracy) or ``'less'`` (a loss, e.g.
            ``'accuracy/nll'`` of ``Accuracy(nll=True)``): which way ``score_key`` is
            better, as in mmengine's ``CheckpointHook(rule=...)``.
        tie_break_key: a second metric, lower is better (``'accuracy/nll'``), that ranks
            subnets whose ``score_key`` ties; top-1 on a few hundred images ties often,
            and the choice between tied candidates is otherwise arbitrary.  None: ties go
            to the fewer FLOPs.
        seed: the seed of the recalibration data order and augmentations (and of an
            evolution's own random generator).
        fp16: score under autocast.
    """

    def __init__(self, runner, dataloader: LoaderOrCfg, evaluator: Union[Evaluator, dict, list],
                 recalib_batches: int = 16, val_batches: Optional[int] = None,
                 calib_dataloader: Optional[LoaderOrCfg] = None,
                 score_key: str = 'accuracy/top1', score_rule: str = 'greater',
                 tie_break_key: Optional[str] = None, seed: int = 0, fp16: bool = False):
        super().__init__(runner, dataloader)
        check_integers(recalib_batches=recalib_batches, val_batches=val_batches, seed=seed)
        if val_batches is not None and val_batches < 1:
            raise ConfigError(f'val_batches must be None or >= 1, got {val_batches}')
        if score_rule not in SCORE_RULES:
            raise ConfigError(f'score_rule must be one of {SCORE_RULES}, got {score_rule!r}')
        self.scorer = SubnetValLoop(runner, self.dataloader, evaluator, subnet=None,
                                    recalib_batches=recalib_batches,
                                    calib_dataloader=calib_dataloader, seed=seed, fp16=fp16,
                                    max_batches=val_batches)
        self.evaluator = self.scorer.evaluator
        self.recalib_batches = recalib_batches
        self.val_batches = val_batches
        self.score_key = score_key
        self.score_rule = score_rule
        self.tie_break_key = tie_break_key
        self.seed = seed
        self._space: Optional[SearchSpace] = None
        self._complexity: Dict[Tuple[Any, ...], Tuple[int, int]] = {}
        self.records: List[SubnetRecord] = []

    @property
    def model(self) -> BaseModel:
        return unwrap(self.runner.model)

    @property
    def space(self) -> SearchSpace:
        """The search space, built on first use (after the checkpoint is loaded)."""
        if self._space is None:
            self._space = self.build_space()
        return self._space

    def check_model(self) -> None:
        """Refuse a supernet this loop cannot search, before any candidate is scored
        (``tools/search.py`` calls it first): one whose ``search_refusal`` says why
        (DARTS: every candidate would score as the softmax mixture and count and export
        as the argmax subnet).

        Raises:
            ConfigError: ``model: <loop> cannot search a <model> supernet: <why>``; or
                an ``EMAHook`` would swap each candidate's masks
                (:func:`~.subnet_val_loop.refuse_ema_swapping_masks`).
        """
        refusal = getattr(self.model, 'search_refusal', None)
        if refusal:
            raise ConfigError(f'model: {type(self).__name__} cannot search a '
                              f'{type(self.model).__name__} supernet: {refusal}')
        refuse_ema_swapping_masks(self.runner, self.model, type(self).__name__)

    def build_space(self) -> SearchSpace:
        """The space the candidates come from (the model checked by :meth:`check_model`
        first): the model's own ``search_space`` when it has one (a NAS supernet's op
        and value choices, ``SPOS.search_space``), else the widths of its pruner
        (AutoSlim)."""
        self.check_model()
        space = getattr(self.model, 'search_space', None)
        if space is not None:
            return space
        if not hasattr(self.model, 'pruner'):
            raise TypeError(f'{type(self).__name__} searches a supernet with a search_space '
                            f'(SPOS) or a pruner (AutoSlim); '
                            f'{type(self.model).__name__} has neither')
        return WidthSpace(self.model.pruner)

    def run(self) -> SearchResult:
        """Run :meth:`search` inside ``before_val``/``before_search`` and
        ``after_search(result)``/``after_val``; return its result (after
        :meth:`check_model`, before any hook)."""
        self.check_model()
        if not any(hasattr(hook, 'after_search') for hook in self.runner.hooks):
            self.runner.logger.warning(
                'no hook has after_search, so nothing will write the chosen subnets; add '
                "custom_hooks=[dict(type='razorlib.DumpSubnetHook')] to the config")
        self.runner.call_hook('before_val')
        self.runner.call_hook('before_search')
        result = self.search()
        self.runner.call_hook('after_search', result=result)
        self.runner.call_hook('after_val')
        return result

    def search(self) -> SearchResult:
        """Search; return every record and the chosen subnets (see :meth:`result`)."""
        raise NotImplementedError

    def measure(self, widths: Widths) -> Tuple[int, int]:
        """Set the subnet and return its (FLOPs, params); cached per subnet."""
        self.model.set_subnet(self.space.subnet(widths))
        key = self.space.key(widths)
        if key not in self._complexity:
            complexity = self.model.flops_params()
            self._complexity[key] = (int(complexity.flops), int(complexity.params))
        return self._complexity[key]

    def evaluate(self, widths: Widths, tag: str, full: bool = False) -> SubnetRecord:
        """Score one subnet with ``self.scorer`` and call ``after_search_candidate``.

        Args:
            widths: the candidate (kept channels per space).
            tag: a label for the log and the record.
            full: validate on the whole dataloader instead of ``val_batches``.
        """
        flops, params = self.measure(widths)
        metrics = self.scorer.validate(self.space.subnet(widths),
                                       None if full else self.val_batches)
        for key in filter(None, (self.score_key, self.tie_break_key)):
            if key not in metrics:
                raise KeyError(f'{"score_key" if key == self.score_key else "tie_break_key"} '
                               f'{key!r} is not among the metrics {sorted(metrics)}')
        record = SubnetRecord(dict(widths), flops, params, float(metrics[self.score_key]), tag,
                              {k: float(v) for k, v in metrics.items()})
        self.runner.logger.info(f'{tag}: FLOPs {human(flops)}, params {human(params)}, '
                                f'{self.score_key} {record.score:.4g}')
        if math.isnan(record.score):
            self.runner.logger.warning(f'{tag}: {self.score_key} is NaN for the subnet '
                                       f'{dict(widths)}; it ranks below every scored subnet')
        self.runner.call_hook('after_search_candidate', record=record)
        return record

    def rank(self, record: SubnetRecord) -> Tuple[bool, float, float]:
        """Sort key of a scored subnet, higher is better: whether its score is a number,
        its score (negated under ``score_rule='less'``), then the negated tie-break
        metric (0 without one).

        A NaN (a diverged candidate op, an overflow) compares false with everything,
        so sorting or ``max`` would put it anywhere, even first: it ranks below every
        number instead, a NaN score below any score and a NaN tie-break metric below
        any tie-break metric.
        """
        score = record.score if self.score_rule == 'greater' else -record.score
        tie = -record.metrics[self.tie_break_key] if self.tie_break_key else 0.0
        return not math.isnan(score), worst_if_nan(score), worst_if_nan(tie)

    def subnet_config(self, widths: Widths) -> ChannelConfig:
        """The channel config of a subnet, as ``export_subnet()`` writes it."""
        self.model.set_subnet(self.space.subnet(widths))
        return self.model.export_subnet()

    def result(self, chosen: Dict[str, SubnetRecord], history: List[SubnetRecord],
               limits: Dict[str, Dict[str, float]]) -> SearchResult:
        """The :class:`SearchResult` of a finished search: every record so far, the
        chosen subnets with their channel configs and limits, and the search's meta."""
        meta = dict(search=type(self).__name__, score_key=self.score_key,
                    score_rule=self.score_rule, tie_break_key=self.tie_break_key,
                    val_batches=self.val_batches)
        configs = {name: self.subnet_config(record.widths) for name, record in chosen.items()}
        return SearchResult(list(self.records), chosen, history, configs, limits, meta)
