"""Modes restored module by module (utils/modes.py), and the calls that run a model in
eval mode for a while giving a training model with frozen BatchNorm back as it was."""
import torch
import torch.nn as nn

import razorlib
from razorlib.utils import evaluating, get_model_complexity, kept_modes


def frozen_bn_net() -> nn.Sequential:
    """A training model whose BatchNorms and dropout were put in eval mode by hand."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.5),
                        nn.Linear(16, 10)).train()
    for module in net.modules():
        if isinstance(module, (nn.BatchNorm2d, nn.Dropout)):
            module.eval()
    return net


def modes(net: nn.Module) -> dict:
    return {name: module.training for name, module in net.named_modules()}


def test_each_module_gets_its_mode_back_after_the_block_even_on_an_error():
    net = frozen_bn_net()
    before = modes(net)
    with evaluating(net):
        assert not any(modes(net).values())
    assert modes(net) == before
    try:
        with kept_modes(net):
            net.train()
            raise KeyError('inside')
    except KeyError:
        pass
    assert modes(net) == before


def test_prune_and_counting_keep_frozen_batch_norms_frozen():
    net, x = frozen_bn_net(), torch.randn(2, 3, 16, 16)
    before = modes(net)
    get_model_complexity(net, x)
    assert modes(net) == before
    for options in (dict(ratio=0.5),
                    dict(ratio=0.5, importance='taylor', data=[(x, torch.tensor([1, 2]))])):
        slim = razorlib.prune(net, x, **options)
        assert slim[0].out_channels == 8
        assert modes(slim) == before, options
        assert modes(net) == before
    running = slim[1].running_mean.clone()
    slim(torch.randn(2, 3, 16, 16) + 3)  # a training step's forward
    assert torch.equal(slim[1].running_mean, running)
