"""``sub_model``: build an architecture and slice it to a channel config, from a config."""
from functools import partial
from pathlib import Path
from typing import Any, Dict, List, Sequence, Union

import torch.nn as nn
from mmengine.logging import MMLogger

from ..pruning import ChannelConfig, slim_model
from ..pruning.channel_config import as_channel_config
from ..pruning.config_check import check_channel_config
from ..registry import MODELS
from ..utils.inputs import random_batch
from .building import pending_pretrained


@MODELS.register_module()
def sub_model(architecture: Union[nn.Module, dict],
              channel_cfg: Union[ChannelConfig, Dict[str, Any], str, Path],
              input_shape: Sequence[int] = (3, 224, 224)) -> nn.Module:
    """The slim subnet of a supernet architecture, for retraining.

    Registered in ``MODELS``, so a config builds it (mmrazor's ``sub_model``)::

        model = dict(type='sub_model', architecture=_base_.architecture,
                     channel_cfg='work_dirs/autoslim_search/subnet.yaml')

    The subnet is freshly initialised (by the runner's ``init_weights()``), unless the
    architecture has a ``Pretrained`` ``init_cfg`` (on itself or any submodule): that
    dense checkpoint does not fit the sliced shapes, so the subnet's ``init_weights()``
    builds the dense model from ``architecture``, initialises it (the checkpoint loads),
    slices it and takes its weights: the kept channels hold the checkpoint's.  Building
    reads no checkpoint (tools that build a model to load their own need not have the
    dense one); an ``architecture`` given built loads it at once, as nothing could build
    it again.  To start from pruned weights instead (``tools/prune.py``'s
    ``slim.pth``), add ``load_from='.../slim.pth'`` to the config.

    The channel config is checked against the architecture before anything is sliced or
    loaded (:func:`~razorlib.pruning.config_check.check_channel_config`): a config of
    another architecture, or one edited by hand, would otherwise fail only at the first
    forward, with a shape error deep in torch that names neither the file nor the layer.

    Args:
        architecture: the supernet's architecture or its config.
        channel_cfg: the subnet's channel config (object, dict form or YAML/JSON file).
        input_shape: ``(C, H, W)`` of one input image: the check traces the architecture
            on a random ``1 x input_shape`` batch (the pruning algorithms'
            ``input_shape``).

    Raises:
        FileNotFoundError: ``channel_cfg: channel config ... does not exist``, with the
            steps that write one.
        ValueError: the channel config names no module or parameter (an empty file, or
            one of another format): the "subnet" would be the whole architecture.  Or it
            does not fit the architecture: ``channel_cfg <file>: ...`` (the file when it
            came from one) naming the module or parameter and what the config gives
            against what the architecture has.

    Example:
        >>> from razorlib.pruning import ChannelSelection
        >>> cfg = ChannelConfig({'0': {'out': ChannelSelection(8, (0, 1, 2))},
        ...                      '1': {'in': ChannelSelection(8, (0, 1, 2))}})
        >>> net = sub_model(nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 2, 1)), cfg)
        >>> net[0].out_channels
        3
    """
    model = MODELS.build(architecture) if isinstance(architecture, dict) else architecture
    named = f'channel_cfg {channel_cfg}' if isinstance(channel_cfg, (str, Path)) else \
        'channel_cfg'  # the file, in the errors of the check below
    try:  # read before any checkpoint is loaded
        channel_cfg = as_channel_config(channel_cfg)
    except FileNotFoundError as err:  # the key too: the config names the file
        raise FileNotFoundError(f'channel_cfg: {err}') from err
    if not channel_cfg.modules and not channel_cfg.params:  # a subnet that is no subnet
        raise ValueError('channel_cfg: the channel config names no module or parameter, so '
                         'the subnet would be the whole architecture; give the subnet.yaml '
                         'a search or tools/prune.py wrote')
    try:
        check_channel_config(model, channel_cfg, random_batch(model, input_shape))
    except ValueError as err:
        raise ValueError(f'{named}: {err}') from err
    checkpoints = pending_pretrained(model)
    if not checkpoints:
        return slim_model(model, channel_cfg)
    if not isinstance(architecture, dict):
        return _pretrained_then_sliced(model, channel_cfg, checkpoints)
    subnet = slim_model(model, channel_cfg)
    subnet.init_weights = partial(_init_from_dense, subnet, architecture, channel_cfg)
    return subnet


def _pretrained_then_sliced(dense: nn.Module, channel_cfg: ChannelConfig,
                            checkpoints: List[str]) -> nn.Module:
    """``dense`` initialised (its Pretrained checkpoints loaded), then sliced; the subnet
    marked initialised, so that the runner's ``init_weights()`` loads nothing over it."""
    dense.init_weights()
    MMLogger.get_current_instance().info(
        f'sub_model: loaded the Pretrained init_cfg ({", ".join(checkpoints)}) into the '
        'dense architecture before slicing; the subnet keeps its channels\' weights')
    subnet = slim_model(dense, channel_cfg)
    subnet._is_init = True
    return subnet


def _init_from_dense(subnet: nn.Module, architecture: dict,
                     channel_cfg: ChannelConfig) -> None:
    """The subnet's ``init_weights()``: the weights of the dense ``architecture``, built
    anew, initialised and sliced to ``channel_cfg``; once."""
    if subnet.is_init:
        return
    dense = MODELS.build(architecture)
    sliced = _pretrained_then_sliced(dense, channel_cfg, pending_pretrained(dense))
    subnet.load_state_dict(sliced.state_dict())
    subnet._is_init = True
