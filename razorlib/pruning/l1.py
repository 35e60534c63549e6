"""L1NormPruner: keep the channels whose weights have the largest L1 norm in the group."""
from typing import Dict, Sequence, Union

import numpy as np
import torch
import torch.nn as nn

from ..registry import PRUNERS
from .structure import StructurePruner


def channel_l1(module: nn.Module, role: str) -> torch.Tensor:
    """L1 norm of the weights that each input/output channel of a layer owns.

    Group and depthwise convs are handled: an input channel owns its column in the
    output channels of its own group only.
    """
    weight = module.weight.detach().abs()
    if isinstance(module, nn.Linear):
        return weight.sum(1) if role == 'out' else weight.sum(0)
    if isinstance(module, nn.Embedding):
        return weight.sum(0)
    groups = module.groups
    per_pair = weight.flatten(2).sum(2)  # (out, in/g) or, transposed, (in, out/g)
    own_axis = 'in' if module.transposed else 'out'
    if role == own_axis:
        return per_pair.sum(1)
    rows = per_pair.shape[0]
    return per_pair.reshape(groups, rows // groups, -1).sum(1).flatten()


@PRUNERS.register_module()
class L1NormPruner(StructurePruner):
    """Keeps, in each space, the channels with the largest L1 norm summed over the group.

    A channel's score adds the L1 norms of every conv/linear weight slice that pruning it
    removes: the output filters of all layers bound in the group and the input columns of
    the layers that read it.  Kept channels are arbitrary indices, not a prefix.

    Args:
        ratio: the fraction of channels to keep, or a sequence to sample from.
        except_start_keys: module-name prefixes whose output channels are never pruned.
        strict: raise instead of freezing channels the tracer cannot handle.

    Example:
        >>> pruner = L1NormPruner(ratio=0.5)
        >>> pruner.prepare_from_supernet(model)        # doctest: +SKIP
        >>> pruner.set_subnet(pruner.sample_subnet())  # doctest: +SKIP
    """

    def __init__(self, ratio: Union[float, Sequence[float]] = 0.5, **kwargs):
        ratios = (ratio, ) if isinstance(ratio, (int, float)) else tuple(ratio)
        super().__init__(ratios=ratios, **kwargs)

    def group_scores(self) -> Dict[str, np.ndarray]:
        """Per prunable space, the summed L1 score of each channel."""
        groups = self._require_prepared()
        labels = groups.labels
        position = np.full(len(labels), -1, dtype=np.int64)
        owner = np.full(len(labels), -1, dtype=np.int64)
        prunable = list(groups.prunable.values())
        scores = [np.zeros(g.num_channels) for g in prunable]
        for i, group in enumerate(prunable):
            position[group.classes] = np.arange(group.num_channels)
            owner[group.classes] = i
        modules = dict(self.model.named_modules())
        for use in self._uses:
            if use.role not in ('in', 'out'):
                continue
            l1 = channel_l1(modules[use.name], use.role).cpu().double().numpy()
            cls = labels[use.slots]
            for i in np.unique(owner[cls][owner[cls] >= 0]).tolist():
                hit = owner[cls] == i
                np.add.at(scores[i], position[cls[hit]], l1[hit])
        return {g.id: s for g, s in zip(prunable, scores)}

    def channel_orders(self) -> Dict[str, np.ndarray]:
        return {gid: np.argsort(-scores, kind='stable')
                for gid, scores in self.group_scores().items()}
