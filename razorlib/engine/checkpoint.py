"""Let ``torch.load(weights_only=True)`` read mmengine 0.10.7 checkpoints.

torch >= 2.6 loads with ``weights_only=True`` by default, which only rebuilds tensors,
plain containers and allow-listed globals.  mmengine 0.10.7 calls ``torch.load`` without
``weights_only``, so resuming from its own checkpoints fails.  Switching the weights-only
mode off for user files would let a checkpoint run arbitrary code; instead we allow-list
exactly the globals that the checkpoints written by ``Runner.save_checkpoint`` (and so
``CheckpointHook``) contain.  They were found by saving real checkpoints (SGD, Adam,
AdamW, RMSprop; LinearLR, MultiStepLR, StepLR, PolyLR, ExponentialLR, CosineRestartLR,
ReduceOnPlateauLR, OneCycleLR; EMAHook; ``save_best``), listing their globals with
``torch.serialization.get_unsafe_globals_in_checkpoint`` and loading them back.
``collections.OrderedDict`` and ``collections.Counter`` (MultiStepLR milestones) are
allowed by torch already.

``builtins.getattr`` is needed because pickle stores a function defined in a class as
``getattr(<class>, '<name>')``; it is replaced by :func:`checkpoint_getattr`, which only
answers the few lookups mmengine's checkpoints make.

Example:
    >>> import torch, razorlib  # importing razorlib registers the globals
    >>> from mmengine.logging import HistoryBuffer
    >>> import io
    >>> buffer = io.BytesIO()
    >>> torch.save({'hub': HistoryBuffer([1.0], [1])}, buffer)
    >>> _ = buffer.seek(0)
    >>> float(torch.load(buffer, weights_only=True)['hub'].current())
    1.0
"""
from pickle import UnpicklingError
from typing import Any, Callable, Dict, FrozenSet, List, Tuple, Union

import numpy as np
import torch
from mmengine.logging import HistoryBuffer
from mmengine.optim.scheduler.param_scheduler import OneCycleParamScheduler
from numpy._core.multiarray import _reconstruct, scalar

#: The only ``getattr(owner, name)`` lookups a checkpoint may make.
CHECKPOINT_ATTRIBUTES: Dict[type, FrozenSet[str]] = {
    # MessageHub -> HistoryBuffer.__getstate__ saves its statistics methods.
    HistoryBuffer: frozenset({'min', 'max', 'current', 'mean'}),
    # OneCycleLR / OneCycleMomentum keep their annealing staticmethod in ``anneal_func``.
    OneCycleParamScheduler: frozenset({'_annealing_cos', '_annealing_linear'}),
}


def checkpoint_getattr(owner: Any, name: str) -> Any:
    """``getattr`` for unpickling, limited to :data:`CHECKPOINT_ATTRIBUTES`.

    Raises:
        pickle.UnpicklingError: any other lookup.
    """
    allowed = next((names for cls, names in CHECKPOINT_ATTRIBUTES.items() if owner is cls),
                   frozenset())
    if name not in allowed:
        raise UnpicklingError(f'refusing getattr({owner!r}, {name!r}) while loading a '
                              'checkpoint: razorlib only allows the lookups mmengine '
                              'checkpoints make')
    return getattr(owner, name)


SafeGlobal = Union[Callable, Tuple[Callable, str]]

#: What mmengine 0.10.7 checkpoints need beyond torch's own allow-list.
CHECKPOINT_GLOBALS: List[SafeGlobal] = [
    # message_hub: MessageHub.state_dict() holds HistoryBuffer objects (log_scalars).
    HistoryBuffer,
    # Class-level functions: HistoryBuffer's statistics, OneCycleLR's annealing.
    (checkpoint_getattr, 'builtins.getattr'),
    # OneCycleLR's state_dict names the class its annealing function lives in.
    OneCycleParamScheduler,
    # HistoryBuffer keeps its history as numpy arrays: ndarray, dtype and the function
    # that rebuilds an array; numpy < 2 pickled it under ``numpy.core``.
    np.ndarray,
    np.dtype,
    # A dtype is rebuilt by setting the state of an instance of its class.  History
    # buffers are float64 (values) and int64 (counts); best scores of metrics that
    # compute in numpy may be float32.
    np.dtypes.Float64DType,
    np.dtypes.Int64DType,
    np.dtypes.Float32DType,
    _reconstruct,
    (_reconstruct, 'numpy.core.multiarray._reconstruct'),
    # numpy scalars, e.g. runtime_info['eta'] (np.float64) and best scores.
    scalar,
    (scalar, 'numpy.core.multiarray.scalar'),
]


def register_checkpoint_globals() -> None:
    """Add :data:`CHECKPOINT_GLOBALS` to torch's ``weights_only`` allow-list (idempotent)."""
    torch.serialization.add_safe_globals(CHECKPOINT_GLOBALS)
