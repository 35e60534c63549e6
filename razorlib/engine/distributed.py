"""Make ``--launcher pytorch`` work on machines without CUDA (gloo, CPU DDP)."""
import torch
import torch.distributed as dist
from mmengine.config import Config


def prepare_cpu_distributed(cfg: Config) -> bool:
    """On a machine without CUDA, start the gloo process group and fix the DDP wrapper.

    Two traps of mmengine 0.10.7 on CPU torch: its ``init_dist`` calls
    ``torch.cuda.set_device``, unless a process group exists already, so we start one
    (``env://``, as ``torchrun`` sets it up); its DDP wrapper gets
    ``device_ids=[LOCAL_RANK]``, which DDP rejects for CPU modules, unless
    ``model_wrapper_cfg`` sets ``device_ids=None``, so we set it.  Call it before
    ``Runner.from_cfg``.

    Args:
        cfg: the config; its ``model_wrapper_cfg`` is updated in place.

    Returns:
        False, doing nothing, when CUDA is available.

    Example:
        >>> cfg = Config(dict(launcher='pytorch'))
        >>> prepare_cpu_distributed(cfg)  # doctest: +SKIP
        True
    """
    if torch.cuda.is_available():
        return False
    if not dist.is_initialized():
        dist.init_process_group('gloo')
    wrapper = cfg.get('model_wrapper_cfg')
    if wrapper is None:  # what mmengine's default wrapper would get, on CPU
        wrapper = dict(type='MMDistributedDataParallel', broadcast_buffers=False,
                       find_unused_parameters=cfg.get('find_unused_parameters', False))
    cfg.model_wrapper_cfg = dict(wrapper, device_ids=None)
    return True
