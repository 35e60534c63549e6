"""Small helpers shared by the hooks and tools."""
import time
from pathlib import Path
from typing import Any, Union

import torch.nn as nn
from mmengine.model import is_model_wrapper

#: the name mmengine 0.10's Runner gives its log folder in the work dir (its timestamp)
LOG_DIR_FORMAT = '%Y%m%d_%H%M%S'


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DDP (or other mmengine) wrapper, or the model itself.

    Example:
        >>> net = nn.Linear(2, 2)
        >>> unwrap(net) is net
        True
    """
    return model.module if is_model_wrapper(model) else model


def new_log_second(work_dir: Union[str, Path]) -> str:
    """Wait, a second at most, until no folder in ``work_dir`` has the name of the current
    second's log folder, and return that name.

    mmengine's Runner logs into ``work_dir/<timestamp to the second>`` and opens its log
    file there to write: a run started in the same second as the one before it in the
    same work dir overwrites that run's log, and a refused search, which removes what
    its Runner wrote, would remove the earlier run's log folder with it (a fast search
    and a refused one after it did, in ``tests/test_tools/test_search_refusals.py``).

    Example:
        >>> import tempfile
        >>> work_dir = Path(tempfile.mkdtemp())
        >>> (work_dir / time.strftime(LOG_DIR_FORMAT)).mkdir()
        >>> (work_dir / new_log_second(work_dir)).exists()
        False
    """
    while (Path(work_dir) / (stamp := time.strftime(LOG_DIR_FORMAT))).exists():
        time.sleep(0.02)
    return stamp


def build_runner(cfg: Any) -> Any:
    """``Runner.from_cfg(cfg)`` with a log folder of its own (:func:`new_log_second`)."""
    from mmengine.runner import Runner

    new_log_second(cfg.work_dir)
    return Runner.from_cfg(cfg)
