"""SubnetValLoop: validate one fixed subnet of a supernet after BatchNorm recalibration."""
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Union

from mmengine.model import BaseModel
from mmengine.runner import ValLoop

from ...pruning import ChannelConfig
from ...registry import LOOPS
from ...utils import preserved_bn_stats
from ..config import ConfigError
from ..utils import unwrap
from .base_search_loop import CalibrationData, LoaderOrCfg
from .bn_calibration import recalibrate_bn
from .width_space import WidthSpace

SubnetSpec = Union[str, Path, Mapping[str, Any]]


@contextmanager
def kept_subnet(model: BaseModel) -> Iterator[None]:
    """Restore the model's subnet and BatchNorm running statistics on exit."""
    subnet = model.current_subnet
    with preserved_bn_stats(model):
        try:
            yield
        finally:
            model.set_subnet(subnet)


def set_subnet(model: BaseModel, subnet: SubnetSpec) -> None:
    """Set a channel config file or dict, or ``{space id: kept channels}``, on ``model``.

    Raises:
        ConfigError: the subnet does not fit the supernet; the message names the file
            (or ``subnet``) and the entry at fault.
    """
    if isinstance(subnet, Mapping) and 'modules' not in subnet:
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
            raise ConfigError(f'recalib_batches must be >= 0, got {recalib_batches}')
        if isinstance(subnet, (str, Path)) and not Path(subnet).is_file():
            raise ConfigError(f'subnet: {subnet} does not exist')
        self.subnet = subnet
        self.recalib_batches = recalib_batches
        self.seed = seed
        self._calib_cfg = calib_dataloader

    def run(self) -> dict:
        """Set the subnet, recalibrate BatchNorm, validate, restore; return the metrics."""
        model = unwrap(self.runner.model)
        with kept_subnet(model):
            set_subnet(model, self.subnet)
            used = recalibrate_bn(model, self.calib_dataloader, self.recalib_batches, self.seed)
            name = self.subnet if isinstance(self.subnet, (str, Path)) else 'the given subnet'
            self.runner.logger.info(f'validating {name} after BatchNorm recalibration on '
                                    f'{used} batches')
            return super().run()
