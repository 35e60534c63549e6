"""ResourceEstimatorHook: FLOPs and parameters of the current subnet, in the log."""
from typing import Dict, Optional, Sequence

import torch.nn as nn
from mmengine.hooks import Hook

from ...registry import HOOKS
from ...utils import Complexity, get_model_complexity
from ...utils.inputs import random_batch
from ..data_check import input_shape_of
from ..utils import unwrap

#: What a model without ``flops_params`` is counted on unless the hook is given a shape.
DEFAULT_INPUT_SHAPE = (3, 224, 224)


@HOOKS.register_module()
class ResourceEstimatorHook(Hook):
    """Log the FLOPs and parameters (in millions) of the model's current subnet.

    They go into the message hub as ``flops_M`` and ``params_M`` scalars with the
    ``val/``, ``test/`` or ``train/`` prefix, so ``LoggerHook`` prints them next to the
    metrics and the visualisation backends record them: after every validation and
    test epoch (for the subnet just evaluated), and every ``interval`` training
    iterations when ``interval > 0``.  A model with ``flops_params()`` (the pruning
    algorithms, AutoSlim, SPOS, ``SingleTeacherDistill``) counts what it deploys
    itself (a distiller its student, not its teacher), on a ``1 x model.input_shape``
    batch: the size its FLOPs targets, the search limits and ``tools/get_flops.py`` use,
    which the tools check against the images of the config.  Any other model is counted
    by ``get_model_complexity`` on a random ``1 x input_shape`` batch (a masked
    supernet at its kept widths) drawn from a generator of its own: logging leaves the
    global RNGs, and so the training run, as they were.

    Args:
        interval: log during training every this many iterations; 0: never.
        input_shape: ``(C, H, W)`` for models without ``flops_params``; default
            ``(3, 224, 224)``.  A model with ``flops_params`` counts on its own
            ``input_shape``, so the hook's must be left out or equal it: another one is
            refused when the run starts (``before_run``), as the FLOPs logged could
            not be those of the size asked for, and logging those of
            ``model.input_shape`` under the hook's would mislead.  Set
            ``model.input_shape`` to count such a model at another size.

    Example:
        >>> custom_hooks = [dict(type='ResourceEstimatorHook', interval=100)]  # in a config
    """
    priority = 'NORMAL'  # before LoggerHook (BELOW_NORMAL), which prints the scalars

    def __init__(self, interval: int = 0, input_shape: Optional[Sequence[int]] = None):
        if interval < 0:
            raise ValueError(f'interval must be >= 0, got {interval}')
        self.interval = interval
        self.input_shape = None if input_shape is None else tuple(input_shape)

    def check(self, model: nn.Module) -> None:
        """Refuse an ``input_shape`` the model would not count on: one other than the
        ``model.input_shape`` of a model with ``flops_params``.

        Raises:
            ValueError: naming both shapes and the model.
        """
        model = unwrap(model)
        own = input_shape_of(model)
        if self.input_shape is None or not hasattr(model, 'flops_params') \
                or own == self.input_shape:
            return
        counted = f'its model.input_shape={own}' if own else 'inputs of its own'
        raise ValueError(f'ResourceEstimatorHook: input_shape={self.input_shape}, but '
                         f'{type(model).__name__} counts its FLOPs and params itself '
                         f'(flops_params) on {counted}; leave the hook\'s input_shape out, '
                         'or set model.input_shape to count at another size')

    def estimate(self, model: nn.Module) -> Dict[str, float]:
        """``{'flops_M': ..., 'params_M': ...}`` of ``model``'s current subnet.

        Raises:
            ValueError: as :meth:`check` does.
        """
        self.check(model)
        model = unwrap(model)
        if hasattr(model, 'flops_params'):
            complexity: Complexity = model.flops_params()
        else:
            complexity = get_model_complexity(
                model, random_batch(model, self.input_shape or DEFAULT_INPUT_SHAPE))
        return {'flops_M': complexity.flops / 1e6, 'params_M': complexity.params / 1e6}

    def before_run(self, runner) -> None:
        self.check(runner.model)  # before training, not at the first logged FLOPs

    def _log(self, runner, mode: str) -> None:
        for key, value in self.estimate(runner.model).items():
            runner.message_hub.update_scalar(f'{mode}/{key}', value)

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs: Optional[dict] = None) -> None:
        if self.interval > 0 and self.every_n_train_iters(runner, self.interval):
            self._log(runner, 'train')

    def after_val_epoch(self, runner, metrics: Optional[Dict[str, float]] = None) -> None:
        self._log(runner, 'val')

    def after_test_epoch(self, runner, metrics: Optional[Dict[str, float]] = None) -> None:
        self._log(runner, 'test')
