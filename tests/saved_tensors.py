"""Measure what the autograd graph saves for the backward: shared by the importance tests."""
from contextlib import contextmanager

import torch


@contextmanager
def saved_bytes(model):
    """``[bytes]``: what the autograd graph saves for the backward in calls to ``model``
    and holds across the forward (checkpointed blocks' own hooks take theirs)."""
    total, hooks = [0], []

    def pack(tensor):
        total[0] += tensor.numel() * tensor.element_size()
        return tensor

    def enter(module, args):
        hooks.append(torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor))
        hooks[-1].__enter__()

    handles = [model.register_forward_pre_hook(enter),
               model.register_forward_hook(lambda *_: hooks.pop().__exit__(None, None, None))]
    try:
        yield total
    finally:
        for handle in handles:
            handle.remove()
