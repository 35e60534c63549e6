"""AutoSlimDDP: the distributed wrapper whose train_step runs AutoSlim's sandwich rule."""
from typing import Dict, Union

import torch
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import OptimWrapper

from ..registry import MODEL_WRAPPERS


@MODEL_WRAPPERS.register_module()
class AutoSlimDDP(MMDistributedDataParallel):
    """``MMDistributedDataParallel`` for :class:`~razorlib.algorithms.AutoSlim`.

    mmengine's wrapper trains with one ``'loss'`` forward, which would skip the sandwich
    rule; this one runs :meth:`AutoSlim.sandwich_step` through its own forward, so DDP
    averages the accumulated gradients of all passes once, in the last backward.

    Args:
        module: the AutoSlim model.
        **kwargs: ``DistributedDataParallel`` arguments; on CPU (gloo) pass
            ``device_ids=None`` (``tools/train.py`` does).

    Example:
        >>> model_wrapper_cfg = dict(type='razorlib.AutoSlimDDP')  # in an AutoSlim config
    """

    def __init__(self, module: torch.nn.Module, **kwargs):
        if not hasattr(module, 'sandwich_step'):
            raise TypeError(f'AutoSlimDDP wraps an AutoSlim model, got {type(module).__name__}')
        super().__init__(module=module, **kwargs)

    def train_step(self, data: Union[dict, tuple, list],
                   optim_wrapper: OptimWrapper) -> Dict[str, torch.Tensor]:
        return self.module.sandwich_step(data, optim_wrapper, runner_model=self)
