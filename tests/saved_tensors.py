"""Measure what the autograd graph saves for the backward: shared by the importance tests."""
import copy
from contextlib import contextmanager

import torch

from razorlib.pruning import ImportancePruner


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


def layerwise_scores(cfg, model, inputs, data, loss_fn, layerwise):
    """(scores, saved bytes, scored copy) of criterion ``cfg`` with ``layerwise`` on a
    copy of ``model``."""
    model = copy.deepcopy(model)
    pruner = ImportancePruner(importance=dict(cfg, layerwise=layerwise))
    pruner.prepare_from_supernet(model, inputs)
    with saved_bytes(model) as total:
        scores = pruner.score(data, loss_fn)
    return scores, total[0], model
