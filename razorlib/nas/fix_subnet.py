"""fix_subnet: a supernet plus a chosen subnet -> a plain ``nn.Module`` with no mutable."""
import copy
from pathlib import Path
from typing import Mapping, Union

import torch.nn as nn

from ..registry import MODELS
from .mutables import Choice, MutableChoice, OneShotMutableOP
from .mutator import NasMutator
from .subnet import FixedSubnet

SubnetLike = Union[FixedSubnet, Mapping[str, Choice], str, Path]


def as_choices(subnet: SubnetLike) -> tuple:
    """(choice dict, where) of a subnet object, dict or file; ``where`` names it in
    errors."""
    if isinstance(subnet, (str, Path)):
        return FixedSubnet.load(subnet).choices, str(subnet)
    if isinstance(subnet, FixedSubnet):
        return subnet.choices, 'subnet'
    return FixedSubnet.from_dict(subnet).choices, 'subnet'


def _static(module: nn.Module) -> nn.Module:
    """``module`` with every mutable op replaced by its chosen candidate and every
    dynamic block by its plain form, recursively (children fixed in place)."""
    while True:
        if isinstance(module, OneShotMutableOP):
            module = module.chosen()
        elif hasattr(module, 'to_static'):
            module = module.to_static()
        else:
            break
    for name, child in list(module.named_children()):
        fixed = _static(child)
        if fixed is not child:
            setattr(module, name, fixed)
    return module


def remaining_mutables(model: nn.Module) -> list:
    """Names of the mutables and dynamic blocks left in ``model`` (empty when fixed)."""
    return [name for name, module in model.named_modules()
            if isinstance(module, MutableChoice) or hasattr(module, 'to_static')]


def fix_subnet(model: nn.Module, subnet: SubnetLike, inplace: bool = False) -> nn.Module:
    """The plain network of ``subnet``: each mutable op becomes its chosen candidate and
    each dynamic block (kernel, expand ratio, depth) the plain block of its values,
    with the supernet's weights (retrain from scratch by re-initialising, or keep them).

    Args:
        model: the supernet architecture (e.g. an ``ImageClassifier`` whose backbone
            has mutables).
        subnet: a :class:`FixedSubnet`, its dict, or its YAML/JSON file.
        inplace: change ``model`` itself instead of a deep copy.

    Raises:
        ValueError: naming the file (or ``subnet``) and the key whose op or value the
            supernet does not have.

    Example:
        >>> from razorlib.nas import OneShotMutableOP
        >>> net = nn.Sequential(OneShotMutableOP(dict(conv=nn.Conv2d(2, 2, 1),
        ...                                           skip=nn.Identity())))
        >>> fix_subnet(net, {'0': 'skip'})
        Sequential(
          (0): Identity()
        )
        >>> fix_subnet(net, {'0': 'pool'})
        Traceback (most recent call last):
        ...
        ValueError: subnet: 0: 'pool' is not a choice of this OneShotMutableOP; its choices ...
    """
    choices, where = as_choices(subnet)
    if not inplace:
        model = copy.deepcopy(model)
    NasMutator(model).set(choices, where)
    fixed = _static(model)
    left = remaining_mutables(fixed)
    if left:
        raise TypeError(f'{where}: {left[0]!r} is still searchable after fixing: a module '
                        'type that neither fix_subnet nor its own to_static() resolves')
    return fixed


def load_fix_subnet(model: nn.Module, subnet: SubnetLike) -> nn.Module:
    """:func:`fix_subnet` in place (mmrazor's name); returns the fixed model."""
    return fix_subnet(model, subnet, inplace=True)


@MODELS.register_module()
def nas_subnet(architecture: Union[nn.Module, dict], fix_subnet: SubnetLike,
               init_weights: bool = True) -> nn.Module:
    """A supernet architecture fixed to a subnet, for training from scratch: what a
    subnet config's ``model`` builds.

    Registered in ``MODELS``, so a config names it::

        model = dict(type='nas_subnet', architecture=_base_.architecture,
                     fix_subnet='work_dirs/spos_shufflenet_digits_search/best_subnet.yaml')

    Args:
        architecture: the supernet architecture or its config.
        fix_subnet: the subnet's YAML/JSON file, or its choice dict.
        init_weights: re-initialise the weights (the architecture's own init, run on the
            fixed network): the subnet trains from scratch.  False keeps the (random or
            loaded) supernet weights.

    Example:
        >>> model = nas_subnet(dict(type='ImageClassifier',
        ...     backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 1, 2)],
        ...                   stem_channels=8, stem='cifar'),
        ...     head=dict(type='LinearClsHead', num_classes=10)),
        ...     fix_subnet={'backbone.stages.0.0': 'shuffle_5x5'})
        >>> type(model.backbone.stages[0][0]).__name__, remaining_mutables(model)
        ('ShuffleBlock', [])
    """
    model = MODELS.build(architecture) if isinstance(architecture, dict) else architecture
    fixed = load_fix_subnet(model, fix_subnet)
    if init_weights:
        reinitialise(fixed)
    return fixed


def reinitialise(model: nn.Module) -> None:
    """Fresh weights for a fixed subnet: each layer's default, then the backbones' own
    initialisation (``_init_weights``) on top, as when they were built."""
    for module in model.modules():
        if hasattr(module, 'reset_parameters'):
            module.reset_parameters()
        if hasattr(module, 'reset_running_stats'):
            module.reset_running_stats()
    for module in model.modules():
        if hasattr(module, '_init_weights'):
            module._init_weights()
