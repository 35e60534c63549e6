"""Make ``--launcher pytorch`` work on machines without CUDA (gloo, CPU DDP)."""
import gc
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

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


@contextmanager
def distributed_run(cfg: Config) -> Iterator[bool]:
    """Run a ``--launcher pytorch`` job and close its process group at the end.

    :func:`prepare_cpu_distributed` on entry; on exit every rank meets at a barrier and
    the group is destroyed.  Gloo's threads live as long as the group, and the group as
    long as anything holds it (a DDP model does): threads still running when the
    interpreter shuts down may reach for the GIL and abort the rank (``terminate called
    without an active exception``), which ``torchrun`` reports as a failed run although
    training finished.  So build the Runner in a function called inside the block, and
    let it go before the block ends: what it left in reference cycles is collected here.
    If gloo threads still run after the block, it warns.

    Args:
        cfg: the config, as for :func:`prepare_cpu_distributed`.

    Yields:
        Whether :func:`prepare_cpu_distributed` set the job up (False on CUDA).

    Example:
        >>> with distributed_run(Config(dict(launcher='pytorch'))):  # doctest: +SKIP
        ...     Runner.from_cfg(cfg).train()
    """
    prepared = prepare_cpu_distributed(cfg)
    try:
        yield prepared
    except BaseException:
        # no barrier: the other ranks may never reach it
        if dist.is_initialized():
            dist.destroy_process_group()
        raise
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    gc.collect()  # the group's last holder, a DDP model, may sit in the Runner's cycles
    left = gloo_threads()
    if left:
        warnings.warn(f'gloo threads still running after the process group was destroyed '
                      f'({", ".join(left)}): something outside the distributed_run block '
                      'still holds the group (a DDP model?), and this rank may abort at exit')


def gloo_threads() -> list:
    """The names of this process's gloo threads (Linux; empty elsewhere).

    Example:
        >>> gloo_threads()  # no process group here
        []
    """
    tasks = Path('/proc/self/task')
    if not tasks.is_dir():
        return []
    names = []
    for task in tasks.iterdir():
        try:
            name = (task / 'comm').read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if 'gloo' in name:
            names.append(name)
    return names
