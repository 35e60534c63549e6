"""Generated architectures: the masked supernet set to a random subnet computes what the
sliced model computes, with and without dead branches (``random_archs.py``)."""
import copy

import numpy as np
import pytest
import torch

from random_archs import random_arch
from razorlib.pruning import L1NormPruner


def masked_and_slim(seed: int):
    """Outputs of the masked supernet at a random subnet and of its sliced twin, and how
    many spaces the subnet cut."""
    model, inputs = random_arch(seed)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, inputs)
    rng = np.random.default_rng(seed)
    subnet = {gid: pruner.keep_ratio(group, rng.uniform(0.05, 1.0),
                                     rng.permutation(group.num_channels))
              for gid, group in pruner.groups.prunable.items()}
    pruner.set_subnet(subnet)
    with torch.no_grad():
        masked = model(inputs)
        slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
        out = slim(inputs)
    cut = sum(not bool(mask.all()) for mask in subnet.values())
    return model, masked, out, cut


def assert_masked_equals_slim(seed: int) -> int:
    model, masked, out, cut = masked_and_slim(seed)
    masked = masked if isinstance(masked, tuple) else (masked, )
    out = out if isinstance(out, tuple) else (out, )
    for a, b in zip(masked, out):
        scale = float(a.abs().max().clamp_min(1e-6))
        err = float((a - b).abs().max())
        assert err <= 1e-5 * scale, f'seed {seed}: |masked - slim| = {err:.3g} ' \
            f'(scale {scale:.3g})\n{model.describe()}'
    return cut


@pytest.mark.parametrize('seed', range(20))
def test_masked_equals_slim(seed):
    assert_masked_equals_slim(seed)


def test_the_generator_draws_every_op_dead_branches_and_both_heads():
    kinds, dead = set(), 0
    for seed in range(1000, 1100):
        model, _ = random_arch(seed)
        kinds.update(step.kind for step in model.steps)
        kinds.update(type(m).__name__ for m in model.modules())
        dead += bool(model.dead_values())
    assert {'add', 'cat', 'chunk', 'pool', 'flatten_head', 'pooled_head', 'SE'} <= kinds
    assert 20 < dead < 80


@pytest.mark.slow
def test_masked_equals_slim_on_500_architectures():
    cuts = [assert_masked_equals_slim(seed) for seed in range(1000, 1500)]
    # most generated networks have something to prune
    assert sum(cut > 0 for cut in cuts) > 350
