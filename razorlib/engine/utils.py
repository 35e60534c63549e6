"""Small helpers shared by the hooks and tools."""
import torch.nn as nn
from mmengine.model import is_model_wrapper


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DDP (or other mmengine) wrapper, or the model itself.

    Example:
        >>> net = nn.Linear(2, 2)
        >>> unwrap(net) is net
        True
    """
    return model.module if is_model_wrapper(model) else model
