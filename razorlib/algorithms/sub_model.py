"""``sub_model``: build an architecture and slice it to a channel config, from a config."""
from pathlib import Path
from typing import Any, Dict, List, Union

import torch.nn as nn
from mmengine.logging import MMLogger
from mmengine.model import BaseModule
from mmengine.model.weight_init import PretrainedInit

from ..pruning import ChannelConfig, slim_model
from ..pruning.channel_config import as_channel_config
from ..registry import MODELS


@MODELS.register_module()
def sub_model(architecture: Union[nn.Module, dict],
              channel_cfg: Union[ChannelConfig, Dict[str, Any], str, Path]) -> nn.Module:
    """The slim subnet of a supernet architecture, for retraining.

    Registered in ``MODELS``, so a config builds it (mmrazor's ``sub_model``)::

        model = dict(type='sub_model', architecture=_base_.architecture,
                     channel_cfg='work_dirs/autoslim_search/subnet.yaml')

    The subnet is freshly initialised (by the runner's ``init_weights()``), unless the
    architecture has a ``Pretrained`` ``init_cfg`` (on itself or any submodule): that
    dense checkpoint does not fit the sliced shapes, so the dense model is initialised
    here, checkpoint loaded, before slicing; the kept channels hold its weights, and the
    subnet is marked initialised so that the runner's ``init_weights()`` does not load it
    again over them.  To start from pruned weights instead (``tools/prune.py``'s
    ``slim.pth``), add ``load_from='.../slim.pth'`` to the config.

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
    try:  # read before any checkpoint is loaded
        channel_cfg = as_channel_config(channel_cfg)
    except FileNotFoundError as err:  # the key too: the config names the file
        raise FileNotFoundError(f'channel_cfg: {err}') from err
    checkpoints = _pending_pretrained(model)
    if not checkpoints:
        return slim_model(model, channel_cfg)
    model.init_weights()
    MMLogger.get_current_instance().info(
        f'sub_model: loaded the Pretrained init_cfg ({", ".join(checkpoints)}) into the '
        'dense architecture before slicing; the subnet keeps its channels\' weights and is '
        'not initialised again')
    model = slim_model(model, channel_cfg)
    model._is_init = True
    return model


def _pending_pretrained(model: nn.Module) -> List[str]:
    """The checkpoints of the ``Pretrained`` init configs in ``model`` that its
    ``init_weights()`` has yet to load (none for a model that is no ``BaseModule``, which
    the runner does not initialise)."""
    if not isinstance(model, BaseModule) or model.is_init:
        return []
    return [str(cfg.get('checkpoint')) for module in model.modules()
            if isinstance(module, BaseModule) for cfg in _init_cfgs(module)
            if cfg.get('type') in ('Pretrained', PretrainedInit)]


def _init_cfgs(module: BaseModule) -> List[dict]:
    """``module.init_cfg`` as a list (mmengine takes a dict, a list of them or None)."""
    init_cfg = module.init_cfg
    return list(init_cfg) if isinstance(init_cfg, list) else [init_cfg] if init_cfg else []
