"""The search-space configs build (digits and ImageNet scale) and every subnet runs."""
import random
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from razorlib.nas import NasMutator, fix_subnet, remaining_mutables
from razorlib.registry import MODELS
from razorlib.utils import get_model_complexity

SPACES = Path(__file__).parents[2] / 'configs' / 'nas' / '_base_'


def build(name: str):
    return MODELS.build(Config.fromfile(str(SPACES / f'{name}.py')).architecture)


@pytest.mark.parametrize('name, mutables', [('spos_shufflenet_digits_space', 7),
                                            ('mbconv_digits_space', 18)])
def test_digits_spaces_run_every_sampled_subnet(name, mutables):
    model = build(name).eval()
    mutator = NasMutator(model)
    assert len(mutator.mutables) == mutables
    rng = random.Random(0)
    for _ in range(3):
        mutator.set(mutator.sample(rng))
        assert model(torch.randn(2, 3, 16, 16)).shape == (2, 10)


@pytest.mark.parametrize('name, mutables, flops_range', [
    ('spos_shufflenet_imagenet_space', 20, (200e6, 500e6)),
    ('mbconv_imagenet_space', 57, (100e6, 900e6)),
])
def test_imagenet_spaces_build_and_their_subnets_fix(name, mutables, flops_range):
    model = build(name).eval()
    mutator = NasMutator(model)
    assert len(mutator.mutables) == mutables
    fixed = fix_subnet(model, mutator.sample(random.Random(0)))
    assert remaining_mutables(fixed) == []
    complexity = get_model_complexity(fixed, torch.randn(1, 3, 224, 224))
    assert flops_range[0] < complexity.flops < flops_range[1]
