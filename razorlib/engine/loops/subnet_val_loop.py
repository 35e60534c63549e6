"""SubnetValLoop: validate one fixed subnet of a supernet after BatchNorm recalibration."""
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple, Union

import torch
from mmengine.model import BaseModel
from mmengine.runner import ValLoop

from ...pruning import ChannelConfig, StructurePruner
from ...registry import LOOPS
from .base_search_loop import CalibrationData, LoaderOrCfg, unwrap
from .bn_calibration import batchnorms, recalibrate_bn
from .width_space import WidthSpace

SubnetSpec = Union[str, Path, Mapping[str, Any]]


def subnet_from_channel_config(pruner: StructurePruner, cfg: ChannelConfig,
                               where: str) -> Dict[str, torch.Tensor]:
    """The subnet dict a channel config describes: each space's leader's kept outputs.

    Raises:
        ValueError: naming the entry of ``where`` (a file name) missing for a space.
    """
    subnet = {}
    for gid in pruner.channel_spaces:
        selection = cfg.kept(gid, 'out')
        if selection is None:
            raise ValueError(f'{where}: modules.{gid}.out_channels is missing; it is a search '
                             'space of this supernet (was the file exported from another one?)')
        keep = torch.zeros(selection.raw, dtype=torch.bool)
        keep[list(selection.index)] = True
        subnet[gid] = keep
    return subnet


def resolve_subnet(model: BaseModel, subnet: SubnetSpec) -> Dict[str, torch.Tensor]:
    """A subnet dict from a channel config file or dict, or from ``{space: width}``."""
    if isinstance(subnet, (str, Path)):
        return subnet_from_channel_config(model.pruner, ChannelConfig.load(subnet), str(subnet))
    if 'modules' in subnet:
        return subnet_from_channel_config(model.pruner, ChannelConfig.from_dict(dict(subnet)),
                                          'subnet')
    return WidthSpace(model.pruner).masks(subnet)


def _running_stats(norm: torch.nn.Module) -> Tuple[torch.Tensor, ...]:
    return norm.running_mean, norm.running_var, norm.num_batches_tracked


@contextmanager
def kept_subnet_and_bn(model: BaseModel) -> Iterator[None]:
    """Restore the model's subnet and BatchNorm running statistics on exit."""
    subnet = model.pruner.current_subnet
    norms = batchnorms(model)
    saved = [[buf.clone() for buf in _running_stats(norm)] for norm in norms]
    try:
        yield
    finally:
        model.set_subnet(subnet)
        for norm, values in zip(norms, saved):
            for buf, value in zip(_running_stats(norm), values):
                buf.copy_(value)


@LOOPS.register_module()
class SubnetValLoop(CalibrationData, ValLoop):
    """mmengine's ``ValLoop`` on one subnet, with BatchNorm recalibrated for it first.

    The supernet's subnet and BatchNorm statistics are restored afterwards, so the loop
    can validate a fixed subnet in the middle of supernet training.

    Args:
        runner: the mmengine runner.
        dataloader: the validation data or its config.
        evaluator: the evaluator or its config.
        subnet: a channel config file (``.yaml``/``.json``, as the searches write), a
            channel config dict, or ``{space id: kept channels}``.
        recalib_batches: training batches for recalibration; 0 keeps the statistics.
        calib_dataloader: the recalibration data or its config; default the runner's
            training dataloader.
        seed: the seed of the recalibration data order and augmentations.
        fp16: validate under autocast.

    Example:
        >>> val_cfg = dict(type='SubnetValLoop', subnet='work_dirs/search/best_subnet.yaml',
        ...                recalib_batches=16)
    """

    def __init__(self, runner, dataloader: LoaderOrCfg, evaluator, subnet: SubnetSpec,
                 recalib_batches: int = 16, calib_dataloader: Optional[LoaderOrCfg] = None,
                 seed: int = 0, fp16: bool = False):
        super().__init__(runner, dataloader, evaluator, fp16)
        if recalib_batches < 0:
            raise ValueError(f'recalib_batches must be >= 0, got {recalib_batches}')
        if isinstance(subnet, (str, Path)) and not Path(subnet).is_file():
            raise FileNotFoundError(f'subnet: no such file {subnet}')
        self.subnet = subnet
        self.recalib_batches = recalib_batches
        self.seed = seed
        self._calib_cfg = calib_dataloader

    def run(self) -> dict:
        """Set the subnet, recalibrate BatchNorm, validate, restore; return the metrics."""
        model = unwrap(self.runner.model)
        where = str(self.subnet) if isinstance(self.subnet, (str, Path)) else 'subnet'
        masks = resolve_subnet(model, self.subnet)
        with kept_subnet_and_bn(model):
            try:
                model.set_subnet(masks)
            except ValueError as err:
                raise ValueError(f'{where}: {err}') from err
            used = recalibrate_bn(model, self.calib_dataloader, self.recalib_batches, self.seed)
            self.runner.logger.info(f'validating {where} after BatchNorm recalibration on '
                                    f'{used} batches')
            return super().run()
