"""``sub_model``: build an architecture and slice it to a channel config, from a config."""
from pathlib import Path
from typing import Any, Dict, Union

import torch.nn as nn

from ..pruning import ChannelConfig, slim_model
from ..registry import MODELS


@MODELS.register_module()
def sub_model(architecture: Union[nn.Module, dict],
              channel_cfg: Union[ChannelConfig, Dict[str, Any], str, Path]) -> nn.Module:
    """The slim subnet of a supernet architecture, freshly initialised, for retraining.

    Registered in ``MODELS``, so a config builds it (mmrazor's ``sub_model``)::

        model = dict(type='sub_model', architecture=_base_.architecture,
                     channel_cfg='work_dirs/autoslim_search/subnet.yaml')

    To start from pruned weights instead (``tools/prune.py``'s ``slim.pth``), add
    ``load_from='.../slim.pth'`` to the config.

    Args:
        architecture: the supernet's architecture or its config.
        channel_cfg: the subnet's channel config (object, dict form or YAML/JSON file).

    Raises:
        FileNotFoundError: ``channel_cfg: channel config ... does not exist``, with the
            steps that write one.

    Example:
        >>> from razorlib.pruning import ChannelSelection
        >>> cfg = ChannelConfig({'0': {'out': ChannelSelection(8, (0, 1, 2))},
        ...                      '1': {'in': ChannelSelection(8, (0, 1, 2))}})
        >>> net = sub_model(nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 2, 1)), cfg)
        >>> net[0].out_channels
        3
    """
    model = MODELS.build(architecture) if isinstance(architecture, dict) else architecture
    try:
        return slim_model(model, channel_cfg)
    except FileNotFoundError as err:  # the key too: the config names the file
        raise FileNotFoundError(f'channel_cfg: {err}') from err
