"""BaseSearchLoop: what every search loop shares; set a subnet, recalibrate, score it."""
from itertools import islice
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import torch
from mmengine.dist import get_world_size
from mmengine.evaluator import Evaluator
from mmengine.model import BaseModel
from mmengine.runner import BaseLoop
from torch.utils.data import DataLoader

from ...utils.complexity import human
from ..config import ConfigError
from ..utils import unwrap
from .bn_calibration import recalibrate_bn
from .results import SCORE_RULES, SubnetRecord
from .width_space import Widths, WidthSpace

LoaderOrCfg = Union[DataLoader, dict]


class CalibrationData:
    """Mixin: a loop's BatchNorm recalibration data, built on first use.

    Set ``_calib_cfg`` to a dataloader, its config, or None for the runner's training
    dataloader (built only when needed, after the runner is set up).
    """
    _calib_cfg: Optional[LoaderOrCfg] = None
    _calib: Optional[DataLoader] = None

    @property
    def calib_dataloader(self) -> DataLoader:
        if self._calib is None:
            if self._calib_cfg is None:
                self._calib = self.runner.train_dataloader
            elif isinstance(self._calib_cfg, dict):
                self._calib = self.runner.build_dataloader(self._calib_cfg, seed=self.runner.seed)
            else:
                self._calib = self._calib_cfg
        return self._calib


class BaseSearchLoop(CalibrationData, BaseLoop):
    """Scores subnets of the runner's AutoSlim supernet; subclasses implement ``run``.

    The model (``runner.model``, unwrapped from DDP) must have ``.pruner``,
    ``set_subnet(dict)``, ``export_subnet()``, ``flops_params()`` (a
    :class:`~razorlib.utils.Complexity`) and ``val_step``, as ``AutoSlim`` has.
    Everything that reads the model happens in ``run``, after the runner has loaded
    the checkpoint.

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
        seed: the seed of the recalibration data order and augmentations.
    """

    def __init__(self, runner, dataloader: LoaderOrCfg, evaluator: Union[Evaluator, dict, list],
                 recalib_batches: int = 16, val_batches: Optional[int] = None,
                 calib_dataloader: Optional[LoaderOrCfg] = None,
                 score_key: str = 'accuracy/top1', score_rule: str = 'greater',
                 tie_break_key: Optional[str] = None, seed: int = 0):
        super().__init__(runner, dataloader)
        if recalib_batches < 0:
            raise ConfigError(f'recalib_batches must be >= 0, got {recalib_batches}')
        if val_batches is not None and val_batches < 1:
            raise ConfigError(f'val_batches must be None or >= 1, got {val_batches}')
        if score_rule not in SCORE_RULES:
            raise ConfigError(f'score_rule must be one of {SCORE_RULES}, got {score_rule!r}')
        self.evaluator = (runner.build_evaluator(evaluator)
                          if isinstance(evaluator, (dict, list)) else evaluator)
        self.evaluator.dataset_meta = getattr(self.dataloader.dataset, 'metainfo', None)
        self.recalib_batches = recalib_batches
        self.val_batches = val_batches
        self.score_key = score_key
        self.score_rule = score_rule
        self.tie_break_key = tie_break_key
        self.seed = seed
        self._calib_cfg = calib_dataloader
        self._space: Optional[WidthSpace] = None
        self._complexity: Dict[Tuple[int, ...], Tuple[int, int]] = {}
        self.records: List[SubnetRecord] = []

    @property
    def model(self) -> BaseModel:
        return unwrap(self.runner.model)

    @property
    def space(self) -> WidthSpace:
        if self._space is None:
            self._space = WidthSpace(self.model.pruner)
        return self._space

    def measure(self, widths: Widths) -> Tuple[int, int]:
        """Set the subnet and return its (FLOPs, params); cached per subnet."""
        self.model.set_subnet(self.space.masks(widths))
        key = self.space.key(widths)
        if key not in self._complexity:
            complexity = self.model.flops_params()
            self._complexity[key] = (int(complexity.flops), int(complexity.params))
        return self._complexity[key]

    def evaluate(self, widths: Widths, tag: str, full: bool = False) -> SubnetRecord:
        """Score one subnet: set it, recalibrate BatchNorm, validate.

        Args:
            widths: kept channels per space.
            tag: a label for the log and the record.
            full: validate on the whole dataloader instead of ``val_batches``.
        """
        flops, params = self.measure(widths)
        recalibrate_bn(self.model, self.calib_dataloader, self.recalib_batches, self.seed)
        metrics = self.validate(None if full else self.val_batches)
        for key in filter(None, (self.score_key, self.tie_break_key)):
            if key not in metrics:
                raise KeyError(f'{"score_key" if key == self.score_key else "tie_break_key"} '
                               f'{key!r} is not among the metrics {sorted(metrics)}')
        record = SubnetRecord(dict(widths), flops, params, float(metrics[self.score_key]), tag,
                              {k: float(v) for k, v in metrics.items()})
        self.runner.logger.info(f'{tag}: FLOPs {human(flops)}, params {human(params)}, '
                                f'{self.score_key} {record.score:.4g}')
        return record

    def rank(self, record: SubnetRecord) -> Tuple[float, float]:
        """Sort key of a scored subnet, higher is better: its score (negated under
        ``score_rule='less'``), then the negated tie-break metric (0 without one)."""
        tie = -record.metrics[self.tie_break_key] if self.tie_break_key else 0.0
        return (record.score if self.score_rule == 'greater' else -record.score), tie

    @torch.no_grad()
    def validate(self, num_batches: Optional[int]) -> Dict[str, float]:
        """Metrics of the current subnet on the first ``num_batches`` batches (None: all)."""
        self.runner.model.eval()
        seen = 0
        for batch in islice(self.dataloader, num_batches):
            outputs = self.runner.model.val_step(batch)
            self.evaluator.process(data_samples=outputs, data_batch=batch)
            seen += len(outputs)
        size = len(self.dataloader.dataset) if num_batches is None else seen * get_world_size()
        return self.evaluator.evaluate(size)

    def save_subnet(self, name: str, widths: Widths) -> Path:
        """Write the subnet's channel config to ``work_dir/<name>.yaml``."""
        self.model.set_subnet(self.space.masks(widths))
        path = Path(self.runner.work_dir) / f'{name}.yaml'
        self.model.export_subnet().dump(path)
        return path
