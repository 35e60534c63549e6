"""Turn per-group keep-masks into the ChannelConfig of every module they touch."""
from typing import Dict, Sequence

import numpy as np

from ..tracing import ChannelGroups, ChannelUse
from .channel_config import ChannelConfig, ChannelSelection


def subnet_channel_config(groups: ChannelGroups, uses: Sequence[ChannelUse],
                          keep: Dict[str, np.ndarray]) -> ChannelConfig:
    """The kept channels of each of ``uses`` when each group keeps ``keep[group id]``."""
    masks = groups.use_masks(keep)
    cfg = ChannelConfig()
    for use in uses:
        kept = masks[(use.name, use.role, use.dim)]
        selection = ChannelSelection(len(kept), tuple(np.nonzero(kept)[0].tolist()))
        if use.role == 'param':
            cfg.params.setdefault(use.name, {})[use.dim] = selection
        else:
            axis = 'in' if use.role == 'in' else 'out'
            cfg.modules.setdefault(use.name, {})[axis] = selection
    return cfg
