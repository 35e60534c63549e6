"""SubnetValLoop: validate one subnet of a supernet after BatchNorm recalibration.

It is also how the search loops score each candidate (:meth:`SubnetValLoop.validate`):
mmengine's ``ValLoop.run_iter`` per batch, the evaluator, and the validation-epoch hook
stages, on the first ``max_batches`` batches.
"""
from contextlib import contextmanager, nullcontext
from itertools import islice
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional, Union

import torch
from mmengine.hooks import EMAHook
from mmengine.model import BaseModel
from mmengine.runner import ValLoop
from mmengine.runner.loops import _parse_losses
from torch.utils.data import DataLoader

from ...pruning import ChannelConfig
from ...registry import LOOPS
from ...utils import preserved_bn_stats
from ..config import ConfigError, check_integers
from ..utils import unwrap
from .bn_calibration import recalibrate_bn
from .width_space import WidthSpace

SubnetSpec = Union[str, Path, Mapping[str, Any]]
LoaderOrCfg = Union[DataLoader, dict]


@contextmanager
def subnet_set(model: BaseModel, subnet: Optional[SubnetSpec]) -> Iterator[None]:
    """Set ``subnet`` (None: keep the model's own) for the ``with`` block; restore the
    model's BatchNorm running statistics, and its subnet where one was set, on exit
    (only then: a supernet that refuses ``set_subnet``, DARTS, validates as it is)."""
    with preserved_bn_stats(model):
        if subnet is None:
            yield
            return
        previous = model.current_subnet
        try:
            set_subnet(model, subnet)
            yield
        finally:
            model.set_subnet(previous)


def set_subnet(model: BaseModel, subnet: SubnetSpec) -> None:
    """Set a subnet on ``model``: for a NAS supernet (one with a ``search_space``: SPOS)
    a choice dict or subnet file; else a channel config file or dict, ``{space id: kept
    channels}``, or the pruner's own ``{space id: keep-mask}``.

    Raises:
        ConfigError: the subnet does not fit the supernet; the message names the file
            (or ``subnet``) and the entry at fault.
    """
    if getattr(model, 'search_space', None) is not None:
        set_choices(model, subnet)
        return
    if isinstance(subnet, Mapping) and 'modules' not in subnet:
        if all(isinstance(value, torch.Tensor) for value in subnet.values()):
            model.set_subnet(dict(subnet))  # keep-masks, as WidthSpace.masks gives them
            return
        try:
            model.set_subnet(WidthSpace(model.pruner).masks(subnet))
        except ValueError as err:
            raise ConfigError(str(err)) from err
        return
    where = 'subnet' if isinstance(subnet, Mapping) else str(subnet)
    try:
        model.set_subnet(ChannelConfig.from_dict(dict(subnet))
                         if isinstance(subnet, Mapping) else subnet)
    except ValueError as err:
        raise ConfigError(f'{where}: {err}') from err


def set_choices(model: BaseModel, subnet: SubnetSpec) -> None:
    """Set a NAS supernet's subnet, a choice dict or a subnet file: its ``set_subnet``
    checks it (its message names the file, or ``subnet``, and the key); a NAS supernet
    has no pruner, so the channel forms do not apply."""
    try:
        model.set_subnet(dict(subnet) if isinstance(subnet, Mapping) else subnet)
    except ValueError as err:
        raise ConfigError(str(err)) from err


def ema_swaps_buffers(runner) -> bool:
    """Whether the runner has an ``EMAHook(update_buffers=True)``: one that swaps the
    model's buffers (masks, BatchNorm statistics) with its averaged copy's around each
    validation epoch."""
    return any(isinstance(hook, EMAHook) and hook.ema_cfg.get('update_buffers', False)
               for hook in getattr(runner, 'hooks', ()))


def refuse_ema_swapping_masks(runner, model: BaseModel, loop: str) -> None:
    """Refuse to validate subnets of a supernet whose subnet is held in buffers (a
    pruner's masks: AutoSlim) under an ``EMAHook(update_buffers=True)``: at
    ``before_val_epoch`` that hook swaps every buffer of the model with its averaged
    copy's, so the subnet the loop set would be replaced by the copy's masks, and
    another subnet than the one named would be validated, silently.

    Raises:
        ConfigError: ``custom_hooks: EMAHook(update_buffers=True) ...``, naming the loop.
    """
    if hasattr(model, 'pruner') and ema_swaps_buffers(runner):
        raise ConfigError(f'custom_hooks: EMAHook(update_buffers=True) swaps the buffers of '
                          f'{type(model).__name__} with those of its averaged copy before '
                          'each validation epoch, the pruning masks among them: '
                          f'{loop} would validate the copy\'s subnet instead of the one it '
                          'sets. Leave EMAHook its default update_buffers=False')


def batch_size(batch: Any) -> int:
    """Images in a collated batch: ``len(batch['inputs'])`` (mmengine's batches are dicts
    with ``inputs``), else ``len(batch)``."""
    return len(batch['inputs']) if isinstance(batch, Mapping) and 'inputs' in batch \
        else len(batch)


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


@LOOPS.register_module()
class SubnetValLoop(CalibrationData, ValLoop):
    """mmengine's ``ValLoop`` on one subnet, with BatchNorm recalibrated for it first.

    The supernet's subnet and BatchNorm statistics are restored afterwards, so the loop
    can validate a fixed subnet in the middle of supernet training.  :meth:`run` calls
    the hooks as ``ValLoop.run`` does (``before_val``, ``before_val_epoch``,
    ``before/after_val_iter``, ``after_val_epoch(metrics)``, ``after_val``).

    Args:
        runner: the mmengine runner.
        dataloader: the validation data or its config.
        evaluator: the evaluator or its config.
        subnet: a channel config file (``.yaml``/``.json``, as the searches write), a
            channel config dict, ``{space id: kept channels}``; for a NAS supernet
            (SPOS) a subnet file or choice dict (``{mutable name: choice}``); or None
            for whatever subnet the model is set to.  A DARTS supernet takes None only
            (its forward is the mixture of every candidate): validate a DARTS subnet as
            its fixed network (``razorlib.nas.fix_subnet``).
        recalib_batches: training batches for recalibration; 0 keeps the statistics.
        calib_dataloader: the recalibration data or its config; default the runner's
            training dataloader.
        seed: the seed of the recalibration data order and augmentations.
        fp16: validate under autocast.
        max_batches: validate on the first ``max_batches`` batches only (give the loader
            a seeded shuffling sampler so they are a fixed random subset); None: all.

    Example:
        >>> val_cfg = dict(type='SubnetValLoop', subnet='work_dirs/search/best_subnet.yaml',
        ...                recalib_batches=16)
    """

    def __init__(self, runner, dataloader: LoaderOrCfg, evaluator, subnet: Optional[SubnetSpec],
                 recalib_batches: int = 16, calib_dataloader: Optional[LoaderOrCfg] = None,
                 seed: int = 0, fp16: bool = False, max_batches: Optional[int] = None):
        super().__init__(runner, dataloader, evaluator, fp16)
        check_integers(recalib_batches=recalib_batches, max_batches=max_batches, seed=seed)
        if recalib_batches < 0:
            raise ConfigError(f'recalib_batches must be >= 0, got {recalib_batches}')
        if max_batches is not None and max_batches < 1:
            raise ConfigError(f'max_batches must be None or >= 1, got {max_batches}')
        if isinstance(subnet, (str, Path)) and not Path(subnet).is_file():
            raise ConfigError(f'subnet: {subnet} does not exist')
        if subnet is not None:  # before training, where the runner builds its val loop
            refuse_ema_swapping_masks(runner, unwrap(runner.model), type(self).__name__)
        self.subnet = subnet
        self.recalib_batches = recalib_batches
        self.seed = seed
        self.max_batches = max_batches
        self._calib_cfg = calib_dataloader

    def check_model(self, subnet: Optional[SubnetSpec]) -> None:
        """Refuse a subnet of a supernet whose forward ignores the subnet set (its
        ``subnet_refusal`` says why: DARTS computes the softmax mixture of every edge),
        before any hook: its metrics would be the supernet's whatever subnet is given.

        Raises:
            ConfigError: ``model: SubnetValLoop cannot validate the subnet <file> (or
                a subnet) of a <model> supernet: <why>``; or an ``EMAHook`` would swap
                the subnet's masks (:func:`refuse_ema_swapping_masks`).
        """
        model = unwrap(self.runner.model)
        refusal = getattr(model, 'subnet_refusal', None)
        if subnet is not None and refusal:
            what = f'the subnet {subnet}' if isinstance(subnet, (str, Path)) else 'a subnet'
            raise ConfigError(f'model: {type(self).__name__} cannot validate {what} of a '
                              f'{type(model).__name__} supernet: {refusal}')
        if subnet is not None:
            refuse_ema_swapping_masks(self.runner, model, type(self).__name__)

    def run(self) -> dict:
        """Validate ``subnet`` (see :meth:`validate`) between ``before_val`` and
        ``after_val``; return the metrics."""
        self.check_model(self.subnet)
        self.runner.call_hook('before_val')
        metrics = self.validate(self.subnet, self.max_batches)
        self.runner.call_hook('after_val')
        return metrics

    @torch.no_grad()
    def validate(self, subnet: Optional[SubnetSpec], max_batches: Optional[int] = None
                 ) -> Dict[str, float]:
        """One validation epoch of a subnet: set it, run ``before_val_epoch``,
        recalibrate BatchNorm, mmengine's ``run_iter`` on the first ``max_batches``
        batches (None: all), evaluate, ``after_val_epoch(metrics)``; restore the model's
        subnet and BatchNorm statistics.  A subnet of a supernet that cannot compute
        one (DARTS) is refused (:meth:`check_model`).

        Args:
            subnet: what :func:`set_subnet` takes, or None for the current subnet.
            max_batches: how many batches to validate on; None: the whole loader.

        Returns:
            The evaluator's metrics (and the validation losses, as ``ValLoop`` adds them).
        """
        self.check_model(subnet)
        model = unwrap(self.runner.model)
        with subnet_set(model, subnet):
            # the hook first: mmengine's EMAHook swaps the averaged weights in there, and
            # the statistics must be those of the weights validated
            self.runner.call_hook('before_val_epoch')
            # under EMAHook(update_buffers=True) the statistics the hook swapped in are
            # put back before after_val_epoch swaps again: it would otherwise take the
            # recalibrated ones into its averaged model (and its checkpoints); without
            # it, after_val_epoch's hooks see the statistics validated (subnet_set
            # restores them after)
            with preserved_bn_stats(model) if ema_swaps_buffers(self.runner) else nullcontext():
                used = recalibrate_bn(model, self.calib_dataloader, self.recalib_batches, self.seed)
                if isinstance(subnet, (str, Path)):
                    self.runner.logger.info(f'validating {subnet} after BatchNorm recalibration '
                                            f'on {used} batches')
                self.runner.model.eval()
                self.val_loss.clear()
                for idx, data_batch in enumerate(islice(self.dataloader, max_batches)):
                    self.run_iter(idx, data_batch)
                # the dataset's length, as ValLoop passes it, also after max_batches: the
                # padding mmengine's DefaultSampler adds (fewer samples than ranks) is each
                # rank's last sample, scored only when the last batch is, and the gathered
                # results cut to the length drop exactly it; a run cut short gathers fewer
                # than the length, all kept
                metrics = self.evaluator.evaluate(len(self.dataloader.dataset))
                if self.val_loss:
                    metrics.update(_parse_losses(self.val_loss, 'val'))
            self.runner.call_hook('after_val_epoch', metrics=metrics)
        return metrics
