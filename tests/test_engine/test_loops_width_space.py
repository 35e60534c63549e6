"""WidthSpace: widths <-> the pruner's masks, in the pruner's channel order; search moves."""
import random

import pytest
import torch

from razorlib.engine.loops import WidthSpace
from razorlib.models import PlainCNN
from razorlib.pruning import L1NormPruner, RatioPruner


def prepared(pruner):
    torch.manual_seed(0)
    pruner.prepare_from_supernet(PlainCNN(channels=(8, 16), num_classes=4),
                                 torch.randn(1, 3, 8, 8))
    return pruner


def test_choices_and_masks_are_what_the_pruner_sets_itself():
    pruner = prepared(RatioPruner(ratios=(0.25, 0.5, 1.0)))
    space = WidthSpace(pruner)
    assert space.choices == {'stages.0.conv': [2, 4, 8], 'stages.1.conv': [4, 8, 16]}
    pruner.set_channel_bins({'stages.0.conv': torch.ones(2), 'stages.1.conv': torch.ones(4)}, 4)
    widths = space.widths(pruner.current_subnet)
    assert widths == {'stages.0.conv': 4, 'stages.1.conv': 16}
    masks = space.masks(widths)
    assert all(torch.equal(masks[k], v) for k, v in pruner.current_subnet.items())


def test_an_l1_pruner_keeps_its_largest_norm_channels():
    pruner = prepared(L1NormPruner(ratio=0.5))
    space = WidthSpace(pruner)
    expected = pruner.sample_subnet()  # the L1 pruner's own half-width subnet
    masks = space.masks(space.uniform(0.5))
    assert all(torch.equal(masks[k], expected[k]) for k in expected)
    assert not masks['stages.1.conv'][:8].all()  # not simply a prefix


@pytest.mark.parametrize('widths, message', [
    ({'stages.0.conv': 4, 'stages.1.conv': 8, 'fc': 2}, "unknown space id 'fc'"),
    ({'stages.0.conv': 4}, "no width for space 'stages.1.conv'"),
    ({'stages.0.conv': 0, 'stages.1.conv': 8}, r'subnet.stages.0.conv: .* \[1, 8\], got 0'),
    ({'stages.0.conv': 4, 'stages.1.conv': 2.5}, r'subnet.stages.1.conv: .* got 2.5'),
])
def test_bad_widths_name_the_space(widths, message):
    with pytest.raises(ValueError, match=message):
        WidthSpace(prepared(RatioPruner())).masks(widths)


def test_mutation_and_crossover_draw_from_the_choices_and_repeat_with_the_seed():
    space = WidthSpace(prepared(RatioPruner()))
    first, second = space.uniform(1.0), space.uniform(1 / 6)
    assert space.mutate(first, 0.0, random.Random(0)) == first
    mutants = [space.mutate(first, 1.0, random.Random(seed)) for seed in range(20)]
    assert all(m[k] in space.choices[k] for m in mutants for k in m)
    assert any(m != first for m in mutants)
    children = [space.crossover(first, second, random.Random(seed)) for seed in range(20)]
    assert all(c[k] in (first[k], second[k]) for c in children for k in c)
    assert {tuple(c.values()) for c in children} >= {(8, 16), (1, 3)} and len(
        {tuple(c.values()) for c in children}) == 4
    assert space.sample(random.Random(5)) == space.sample(random.Random(5))


def test_moves_refuse_bad_widths_naming_the_space_before_drawing():
    space = WidthSpace(prepared(RatioPruner()))
    good = space.uniform(1.0)
    rng = random.Random(0)
    state = rng.getstate()
    with pytest.raises(ValueError, match="mutate: no width for space 'stages.1.conv'"):
        space.mutate({'stages.0.conv': 4}, 1.0, rng)
    with pytest.raises(ValueError, match="crossover: second: unknown space id 'fc'"):
        space.crossover(good, dict(good, fc=2), rng)
    with pytest.raises(ValueError, match=r'crossover: first.stages.0.conv: .* got 99'):
        space.crossover(dict(good, **{'stages.0.conv': 99}), good, rng)
    assert rng.getstate() == state


class ConcatAdd(torch.nn.Module):
    """``cat([a(x), b(x)]) + d(x)``: one group of 16 channels with two parts (a, b)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(3, 8, 1), torch.nn.Conv2d(3, 8, 1)
        self.d, self.c = torch.nn.Conv2d(3, 16, 1), torch.nn.Conv2d(16, 4, 1)

    def forward(self, x):
        return self.c(torch.cat([self.a(x), self.b(x)], 1) + self.d(x))


def test_masks_keep_a_channel_of_every_part_as_the_pruner_does():
    torch.manual_seed(0)
    model = ConcatAdd()
    with torch.no_grad():
        model.a.weight.mul_(100)  # a's channels rank first: the 4 best are all a's
    pruner = L1NormPruner(ratios=(0.25, 1.0))
    pruner.prepare_from_supernet(model, torch.randn(1, 3, 4, 4))
    space = WidthSpace(pruner)
    (gid, ) = space.sizes
    mask = space.masks({gid: 4})[gid]
    assert mask[:8].any() and mask[8:].any() and int(mask.sum()) == 4
    pruner.set_subnet({gid: mask})  # the pruner accepts it: no part left empty
