"""A chunk keeps its pieces: a subnet never cuts a chunk's input, or a layer bound into a
chunked group, below one channel.

``torch.cat([a, b], 1).chunk(2, 1)`` with ``a`` 2 and ``b`` 6 channels binds a's channels to
some of b's: the group has 4 channels, two of which are b's alone, so keeping only those
left ``a`` with no channel (the slim model could not be built); an all-pruned chunk input
would leave fewer pieces than the code indexes (``IndexError: tuple index out of range``).
"""
import copy

import numpy as np
import pytest
import torch
import torch.nn as nn

from razorlib.pruning import L1NormPruner

X = torch.randn(2, 3, 8, 8)


class CatChunk(nn.Module):
    """cat(a, b).chunk(2)[1] -> head; with ``own_chunk`` also a.chunk(2)[0] -> head2."""

    def __init__(self, own_chunk=False):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 2, 1), nn.Conv2d(3, 6, 1)
        self.head = nn.Conv2d(4, 4, 1)
        self.head2 = nn.Conv2d(1, 4, 1) if own_chunk else None

    def forward(self, x):
        a, b = self.a(x), self.b(x)
        out = self.head(torch.cat([a, b], 1).chunk(2, 1)[1])
        if self.head2 is not None:
            out = out + self.head2(a.chunk(2, 1)[0])
        return out


def prepared(model):
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    (group, ) = pruner.groups.prunable.values()
    return pruner, group


def test_keep_masks_keep_a_channel_of_every_layer_of_the_group():
    torch.manual_seed(0)
    model = CatChunk().eval()
    pruner, group = prepared(model)
    assert set(group.layers) == {'a', 'b'} and group.num_channels == 4
    rng = np.random.default_rng(0)
    for _ in range(20):
        keep = pruner.keep_ratio(group, 0.01, rng.permutation(group.num_channels))
        assert int(keep.sum()) == 1  # one channel can serve both layers
        pruner.set_subnet({group.id: keep})
        with torch.no_grad():
            masked = model(X)
            slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
            assert slim.a.out_channels == 1 and slim.b.out_channels == 1
            assert torch.allclose(masked, slim(X), atol=1e-6)


def test_a_subnet_that_empties_a_layer_is_refused_naming_space_and_layer():
    pruner, group = prepared(CatChunk())
    (b_only, ) = [i for i, (what, index) in enumerate(group.parts) if what == 'a']
    keep = np.ones(group.num_channels, dtype=bool)
    keep[group.parts[b_only][1]] = False
    with pytest.raises(ValueError, match=rf"space '{group.id}': the subnet keeps no channel "
                       r'of a \(output channels\), but a layer needs at least one'):
        pruner.set_subnet({group.id: torch.from_numpy(keep)})
    assert pruner.current_subnet[group.id].all()  # nothing changed


def test_a_subnet_that_empties_a_chunk_input_is_refused_naming_the_chunk():
    pruner, group = prepared(CatChunk(own_chunk=True))
    chunk = [index for what, index in group.parts if what.startswith('the input of a chunk')]
    assert chunk, group.parts
    keep = np.ones(group.num_channels, dtype=bool)
    keep[chunk[0]] = False
    with pytest.raises(ValueError, match=rf"space '{group.id}': the subnet keeps no channel "
                       r"of the "
                       r'input of a chunk into 2 pieces \(SplitBackward0 after a\), but each '
                       'piece needs at least one'):
        pruner.set_subnet({group.id: torch.from_numpy(keep)})


def test_a_chunked_group_stays_divisible_down_to_one_channel_per_piece():
    class Halves(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.head = nn.Conv2d(3, 8, 1), nn.Conv2d(4, 4, 1)

        def forward(self, x):
            first, second = self.a(x).chunk(2, dim=1)
            return self.head(first * torch.sigmoid(second))
    torch.manual_seed(0)
    model = Halves().eval()
    pruner, group = prepared(model)
    assert group.num_channels == 4 and group.width == 8
    pruner.set_subnet(pruner.subnet_at(0.01))
    with torch.no_grad():
        masked = model(X)
        slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
        assert slim.a.out_channels == 2 and slim.head.in_channels == 1
        assert torch.allclose(masked, slim(X), atol=1e-6)


def test_keep_best_gives_back_unneeded_channels_to_keep_the_count():
    from razorlib.tracing import ChannelGroup
    group = ChannelGroup('g', 6, 6, parts=[('x', np.array([4, 5])), ('y', np.array([3]))])
    order = np.arange(6)
    assert group.keep_best(order, 3).nonzero()[0].tolist() == [0, 3, 4]
    assert group.keep_best(order, 1).nonzero()[0].tolist() == [3, 4]  # the parts need two
    assert group.keep_best(order[::-1], 2).nonzero()[0].tolist() == [3, 5]
