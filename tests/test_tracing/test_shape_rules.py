"""Rules that move channels between dims: each checked on the grad_fn torch produces."""
import functools

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import Traced
from masked_vs_slim import deploy_checked
from razorlib.pruning import L1NormPruner
from razorlib.tracing.shape_rules import reshape_groups

X = torch.randn(1, 3, 4, 4)


class Net(nn.Module):
    """Convs ``a`` (8 ch), ``b`` (6 ch); ``body`` combines them; Linear ``head``."""

    def __init__(self, body, head_in=None, out=None):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 1), nn.Conv2d(3, 6, 1)
        self.body = body
        self.head = nn.Linear(head_in, 2) if head_in else None
        self.out = out

    def forward(self, x):
        y = self.body(self, self.a(x), self.b(x))
        return self.head(y) if self.head is not None else y


def test_grad_fn_names_of_shape_ops():
    x = torch.randn(2, 8, 4, 4, requires_grad=True)
    names = {
        'PermuteBackward0': x.permute(0, 2, 3, 1), 'TransposeBackward0': x.transpose(1, 2),
        'TBackward0': x[0, 0].t(), 'ViewBackward0': x.flatten(1),
        'UnsafeViewBackward0': torch.matmul(x.flatten(2).transpose(1, 2), x[0, :, 0]),
        'ReshapeAliasBackward0': torch.ops.aten._reshape_alias(x, (2, 128), (128, 1)),
        'SqueezeBackward0': x[:, :1].squeeze(), 'SqueezeBackward1': x[:, :, :1].squeeze(2),
        'SqueezeBackward2': x[:, :, :1].squeeze((2, )), 'UnsqueezeBackward0': x.unsqueeze(0),
        'ExpandBackward0': x[:1].expand(3, -1, -1, -1), 'RepeatBackward0': x.repeat(1, 2, 1, 1),
        'FlipBackward0': x.flip(1), 'CatBackward0': torch.cat([x, x], 1),
        'StackBackward0': torch.stack([x, x]), 'SplitBackward0': x.chunk(2, 1)[0],
        'SplitWithSizesBackward0': x.split([3, 5], 1)[0], 'UnbindBackward0': x.unbind(2)[0],
        'SliceBackward0': x[:, 1:3], 'SelectBackward0': x[:, 1],
        'BmmBackward0': torch.bmm(x.flatten(2), x.flatten(2).transpose(1, 2)),
    }
    assert {name: t.grad_fn.name() for name, t in names.items()} == \
        {name: name for name in names}


def test_reshape_groups():
    assert reshape_groups((2, 8, 4, 4), (2, 128)) == [([0], [0]), ([1, 2, 3], [1])]
    assert reshape_groups((1, 96), (1, 3, 4, 8)) == [([1], [1, 2, 3])]
    assert reshape_groups((1, 8, 1, 1), (1, 8)) == [([1], [1])]
    assert reshape_groups((6, 4), (4, 6)) == [([0, 1], [0, 1])]


@pytest.mark.parametrize('in_shape,out_shape', [((3, 4, 2), (3, 4)), ((3, 4), (3, 1, 4, 2))])
def test_reshape_groups_refuses_dims_left_over(in_shape, out_shape):
    """Element counts that differ leave a dim with no partner: an error, not a drop."""
    with pytest.raises(ValueError) as err:
        reshape_groups(in_shape, out_shape)
    assert str(err.value) == f'cannot align reshape {in_shape} -> {out_shape}'


def test_flatten_into_linear_gives_each_channel_hw_features():
    traced = Traced(Net(lambda m, a, b: a.flatten(1), head_in=8 * 16), X)
    head_in = traced.classes('head', 'in')
    assert (head_in == np.repeat(traced.classes('a'), 16)).all()
    assert 'head' in traced.group_of('a').consumers


def test_permute_moves_channels_for_channels_last_linear():
    traced = Traced(Net(lambda m, a, b: a.permute(0, 2, 3, 1).mean((1, 2)), head_in=8), X)
    assert (traced.classes('head', 'in') == traced.classes('a')).all()
    traced = Traced(Net(lambda m, a, b: a.flatten(2).transpose(1, 2).mean(1), head_in=8), X)
    assert (traced.classes('head', 'in') == traced.classes('a')).all()


def _shuffled(y, groups=2):
    """ShuffleNet's channel shuffle of ``groups`` groups."""
    n, c, h, w = y.shape
    return y.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


def _shuffle(m, a, b):
    return _shuffled(a).mean((2, 3))


def test_channel_shuffle_binds_blocks_and_permutes():
    traced = Traced(Net(_shuffle, head_in=8), X)
    a = traced.classes('a')
    assert (a[:4] == a[4:]).all() and len(set(a.tolist())) == 4
    # shuffled position 2i + j holds channel j*4 + i
    expected = np.array([a[j * 4 + i] for i in range(4) for j in range(2)])
    assert (traced.classes('head', 'in') == expected).all()
    assert traced.group_of('a').prunable and traced.group_of('a').num_channels == 4


def _unshuffled(y, groups=2):
    """The inverse of ``_shuffled(y, groups)``: the group count is the trailing factor."""
    n, c, h, w = y.shape
    return y.view(n, c // groups, groups, h, w).transpose(1, 2).reshape(n, c, h, w)


def _unshuffled_by_minus_one(y, groups=2):
    n, c, h, w = y.shape
    return y.reshape(n, -1, groups, h, w).transpose(1, 2).reshape(n, c, h, w)


@pytest.mark.parametrize('unshuffle', [_unshuffled, _unshuffled_by_minus_one])
def test_inverse_channel_shuffle_keeps_whole_rows_and_permutes(unshuffle):
    """``view(b, c // g, g, ...)`` keeps ``g`` as the code gave it: pruning drops whole
    rows of ``g`` channels, and position 4j + i of the output holds channel 2i + j.
    (Bound as a shuffle's ``view(b, g, c // g, ...)``, the rows elementwise, the slim
    model re-split them and the pruner froze the channels.)"""
    traced = Traced(Net(lambda m, a, b: unshuffle(a).mean((2, 3)), head_in=8), X)
    a = traced.classes('a')
    assert (a[0::2] == a[1::2]).all() and len(set(a.tolist())) == 4
    assert (traced.classes('head', 'in') == np.concatenate([a[0::2], a[1::2]])).all()
    assert traced.group_of('a').prunable and traced.group_of('a').num_channels == 4


def test_channel_shuffle_then_its_inverse_is_the_identity():
    traced = Traced(Net(lambda m, a, b: _unshuffled(_shuffled(a)).mean((2, 3)), head_in=8), X)
    a = traced.classes('a')
    assert (a[:4] == a[4:]).all() and len(set(a.tolist())) == 4
    assert (traced.classes('head', 'in') == a).all()
    assert traced.group_of('a').prunable and traced.group_of('a').num_channels == 4


class ShuffledConvs(nn.Module):
    """conv ``a`` (12 channels) -> ``shuffle`` -> conv ``c``."""

    def __init__(self, shuffle):
        super().__init__()
        self.a, self.c, self.shuffle = nn.Conv2d(3, 12, 1), nn.Conv2d(12, 4, 1), shuffle

    def forward(self, x):
        return self.c(self.shuffle(self.a(x)))


@pytest.mark.parametrize('shuffle,classes', [
    (_unshuffled, 6),
    (functools.partial(_unshuffled, groups=3), 4),
    (_unshuffled_by_minus_one, 6),
    (lambda y: _unshuffled(_shuffled(y, 3), 3), 4),
    (lambda y: _shuffled(_unshuffled(y)), 6),
    (lambda y: torch.channel_shuffle(y, 3), 4),
    (nn.ChannelShuffle(2), 6),
    (lambda y: _unshuffled(torch.channel_shuffle(y, 2)), 6),
], ids=['g=2', 'g=3', '-1', 'shuffle then inverse', 'inverse then shuffle',
        'channel_shuffle g=3', 'nn.ChannelShuffle g=2', 'channel_shuffle then its inverse'])
def test_pruned_channel_shuffles_compute_what_their_slim_models_do(shuffle, classes):
    """Pruned by whole rows of its group count, the slim inverse shuffle views the kept
    channels in the order the masked one leaves them in; pruned by the same channels of
    each of its ``g`` groups, the slim ``channel_shuffle`` (``g`` unchanged) permutes the
    kept channels as the masked one does (``deploy_checked`` compares the outputs); the
    pruner, which freezes a group whose slim model computes something else, keeps them
    prunable."""
    torch.manual_seed(0)
    model = ShuffledConvs(shuffle).eval()
    x = torch.randn(2, 3, 4, 4)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    assert {gid: g.num_channels for gid, g in pruner.groups.prunable.items()} == {'a': classes}
    for seed in range(3):
        torch.manual_seed(seed)
        pruner.set_subnet(pruner.sample_subnet())
        slim = deploy_checked(pruner, model, x)[1]
        assert slim.a.out_channels == slim.c.in_channels < 12


def test_inverse_channel_shuffle_of_sizes_all_the_codes_own_freezes():
    """``view(b, int(c / 2), 2, ...)`` gives both sizes as plain numbers: the walk cannot
    tell it from a shuffle of ``c / 2`` groups, whose slim model keeps that many rows, so
    it binds the rows as a shuffle's; the pruner finds the slim model computing
    something else and freezes the channels rather than prune them wrong."""
    def unshuffle(y):
        n, c, h, w = y.shape
        return y.view(n, int(c / 2), 2, h, w).transpose(1, 2).reshape(n, c, h, w)
    torch.manual_seed(0)
    model = ShuffledConvs(unshuffle).eval()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, torch.randn(2, 3, 4, 4))
    assert not pruner.groups.prunable
    (reason, ) = pruner.groups.groups['a'].frozen_reasons
    assert reason.kind == 'runtime'
    assert 'the slim model computes other outputs than the masked one' in reason.message


@pytest.mark.parametrize('groups', [2, 4])
def test_torch_channel_shuffle_is_traced_as_its_view_form(groups):
    """``torch.channel_shuffle(x, g)`` (whose grad_fn saves ``g``) binds and permutes the
    channels exactly as ``view(b, g, c // g, ...).transpose(1, 2).reshape`` does; it
    froze them as a mixing op before."""
    x = torch.randn(1, 8, 2, 2, requires_grad=True)
    node = torch.channel_shuffle(x, groups).grad_fn
    assert (node.name(), node._saved_groups) == ('ChannelShuffleBackward0', groups)
    traced = Traced(Net(lambda m, a, b: torch.channel_shuffle(a, groups).mean((2, 3)),
                        head_in=8), X, strict=True)
    viewed = Traced(Net(lambda m, a, b: _shuffled(a, groups).mean((2, 3)), head_in=8), X)
    a = traced.classes('a')
    assert len(set(a.tolist())) == 8 // groups
    assert (a == viewed.classes('a')).all()
    assert (traced.classes('head', 'in') == viewed.classes('head', 'in')).all()
    assert traced.group_of('a').prunable and not traced.reasons('a')


def test_split_read_by_a_matmul_is_heads_whose_channels_go_together():
    def heads(m, a, b):
        n, _, h, w = a.shape
        q = a.view(n, -1, 4, h * w)
        return (q @ q.transpose(-2, -1)).flatten(1)
    traced = Traced(Net(heads, head_in=2 * 4 * 4), X)
    group = traced.group_of('a')
    assert group.prunable and group.num_channels == 2
    classes = traced.classes('a')
    assert len(set(classes[:4])) == len(set(classes[4:])) == 1 and classes[0] != classes[4]


def test_reshape_into_three_factors_must_be_narrowed_before_other_ops():
    traced = Traced(Net(lambda m, a, b: a.reshape(1, 2, 2, 2, 16).sum((1, 2, 3, 4))), X)
    (reason, ) = traced.reasons('a')
    assert reason.op == 'SumBackward1' and '2x2x2 grid' in reason.message


def test_expand_repeat_flip():
    traced = Traced(Net(lambda m, a, b: a.mean((2, 3)).expand(3, 8).mean(0, keepdim=True),
                        head_in=8), X)
    assert (traced.classes('head', 'in') == traced.classes('a')).all()
    traced = Traced(Net(lambda m, a, b: a.mean((2, 3)).repeat(1, 2), head_in=16), X)
    assert (traced.classes('head', 'in') == np.tile(traced.classes('a'), 2)).all()
    traced = Traced(Net(lambda m, a, b: a.mean((2, 3)).flip(1), head_in=8), X)
    assert (traced.classes('head', 'in') == traced.classes('a')[::-1]).all()


def test_cat_offsets_and_fixed_pieces():
    traced = Traced(Net(lambda m, a, b: torch.cat([a, b], 1).mean((2, 3)), head_in=14), X)
    head_in = traced.classes('head', 'in')
    assert (head_in[:8] == traced.classes('a')).all() and (head_in[8:] == traced.classes('b')).all()
    assert traced.group_of('a') is not traced.group_of('b')
    # a model input joined by cat contributes fixed channels; ``a`` stays prunable
    traced = Traced(Net(lambda m, a, b: torch.cat([a, torch.ones(1, 3, 4, 4)], 1).mean((2, 3)),
                        head_in=11), X)
    assert traced.group_of('a').prunable
    # the same tensor twice repeats its slots
    traced = Traced(Net(lambda m, a, b: torch.cat([a, a], 1).mean((2, 3)), head_in=16), X)
    assert (traced.classes('head', 'in') == np.tile(traced.classes('a'), 2)).all()


def test_cat_on_another_dim_binds_channels():
    traced = Traced(Net(lambda m, a, b: torch.cat([a, m.a(a.new_ones(1, 3, 4, 4))], 2)
                        .mean((2, 3)), head_in=8), X)
    assert traced.group_of('a').prunable
    padded = Traced(Net(lambda m, a, b: torch.cat([a, F.pad(b, (0, 0, 0, 0, 0, 2))], 2)
                        .mean((2, 3)), head_in=8), X)
    assert padded.group_of('a').frozen


def test_stack_binds():
    traced = Traced(Net(lambda m, a, b: torch.stack([a, m.a(a.new_ones(1, 3, 4, 4))]).mean(
        (0, 3, 4)), head_in=8), X)
    assert (traced.classes('head', 'in') == traced.classes('a')).all()


def _second_of_split_3_5(m, a, b):
    return a.split([3, 5], 1)[1].mean((2, 3))


def test_chunk_binds_parts_and_uneven_chunks_freeze():
    traced = Traced(Net(lambda m, a, b: sum(a.chunk(2, 1)).mean((2, 3)), head_in=4), X)
    a = traced.classes('a')
    assert (a[:4] == a[4:]).all() and traced.group_of('a').prunable
    traced = Traced(Net(lambda m, a, b: sum(p.mean() for p in a.split(3, 1))), X)
    assert [r.op for r in traced.reasons('a')] == ['SplitBackward0']


def test_split_sizes_give_each_part_its_channels_to_be_checked_on_the_model():
    traced = Traced(Net(_second_of_split_3_5, head_in=5), X)
    assert (traced.classes('head', 'in') == traced.classes('a')[3:]).all()
    assert traced.group_of('a').prunable and traced.groups.sliced == ['a']
    assert [(what, index.tolist()) for what, index in traced.group_of('a').parts] == [
        ('a part of channels 0:3 (SplitWithSizesBackward0 after a)', [0, 1, 2]),
        ('a part of channels 3:8 (SplitWithSizesBackward0 after a)', [3, 4, 5, 6, 7])]
    with pytest.raises(ValueError, match=r"space 'a': the subnet keeps no channel of a part "
                       r'of channels 0:3 \(SplitWithSizesBackward0 after a\)'):
        traced.groups.check_keep({'a': np.arange(8) >= 3})


@pytest.mark.parametrize('verify, reason', [
    (True, 'the model code fails when these channels are pruned: RuntimeError: '
     'split_with_sizes expects split_sizes to sum exactly to 4'),
    (False, 'the slim model computes other outputs than the masked one (RuntimeError: '
     'split_with_sizes expects split_sizes to sum exactly to 4')])
def test_a_literal_split_size_freezes_on_the_model_saying_why(verify, reason):
    pruner = L1NormPruner(ratio=0.5, verify=verify)
    pruner.prepare_from_supernet(Net(_second_of_split_3_5, head_in=5), X)
    assert not pruner.groups.prunable
    (frozen, ) = pruner.groups.groups['a'].frozen_reasons
    assert (frozen.kind, frozen.op) == ('runtime', 'a') and frozen.message.startswith(reason)


def test_slice_select_unbind():
    full = Traced(Net(lambda m, a, b: a[:, :, 1:3].mean((2, 3)), head_in=8), X)
    assert full.group_of('a').prunable
    # a part of the channels: they follow the slice, to be checked on the model
    part = Traced(Net(lambda m, a, b: a[:, 2:5].mean((2, 3)), head_in=3), X)
    assert (part.classes('head', 'in') == part.classes('a')[2:5]).all()
    assert part.group_of('a').prunable and part.groups.sliced == ['a']
    strided = Traced(Net(lambda m, a, b: a[:, ::2].mean()), X)
    assert [r.op for r in strided.reasons('a')] == ['SliceBackward0']
    select = Traced(Net(lambda m, a, b: a[:, 0].mean()), X)
    assert [r.op for r in select.reasons('a')] == ['SelectBackward0']
    unbind = Traced(Net(lambda m, a, b: a.unbind(2)[0].mean(2), head_in=8), X)
    assert (unbind.classes('head', 'in') == unbind.classes('a')).all()
    unbind_channels = Traced(Net(lambda m, a, b: a.unbind(1)[0].mean()), X)
    assert [r.op for r in unbind_channels.reasons('a')] == ['UnbindBackward0']


def test_index_keeps_the_channels_of_dims_it_does_not_index():
    rows = torch.tensor([[0, 1], [2, 3]])
    # a (H, W, C) view indexed on H: C keeps its slots, after the index's two dims
    kept = Traced(Net(lambda m, a, b: a[0].permute(1, 2, 0)[rows].mean((0, 1, 2)),
                      head_in=8), X)
    assert (kept.classes('head', 'in') == kept.classes('a')).all()
    assert kept.group_of('a').prunable
    indexed = Traced(Net(lambda m, a, b: a[:, torch.tensor([0, 2])].mean()), X)
    assert [r.op for r in indexed.reasons('a')] == ['IndexBackward0']
    # index tensors on H and W, apart, around C: everything freezes, C too
    apart = Traced(Net(lambda m, a, b: a[0].permute(1, 0, 2)[torch.tensor([0, 1]), :,
                                                             torch.tensor([1, 2])].mean()), X)
    assert [(r.op, r.message) for r in apart.reasons('a')] == [
        ('IndexBackward0', 'indexes with tensors on dims apart')]


def test_squeeze_unsqueeze():
    traced = Traced(Net(lambda m, a, b: a.mean((2, 3), keepdim=True).squeeze(3).squeeze(2)
                        .unsqueeze(0).squeeze(0), head_in=8), X)
    assert (traced.classes('head', 'in') == traced.classes('a')).all()


def test_bmm_contraction_binds_and_output_takes_row_and_column_slots():
    def gram(m, a, b):
        fa = a.flatten(2)                     # 1 x 8 x 16
        return torch.bmm(fa, fa.transpose(1, 2)).mean(2)   # 1 x 8 x 8 -> 1 x 8
    traced = Traced(Net(gram, head_in=8), X)
    assert (traced.classes('head', 'in') == traced.classes('a')).all()

    def contract(m, a, b):
        fa = a.flatten(2).transpose(1, 2)     # 1 x 16 x 8
        fb = F.pad(b, (0, 0, 0, 0, 0, 2)).flatten(2)  # 1 x 8 x 16
        return torch.bmm(fa, fb).sum()
    traced = Traced(Net(contract), X)
    # ``a``'s channels are contracted with ``b``'s padded channels: those are fixed
    assert traced.group_of('a').frozen


@pytest.mark.parametrize('dim', [1, -3])
def test_negative_dims_are_normalised(dim):
    traced = Traced(Net(lambda m, a, b: torch.cat([a, b], dim).mean((2, 3)), head_in=14), X)
    assert (traced.classes('head', 'in')[:8] == traced.classes('a')).all()


class PairHead(nn.Module):
    """b's two outputs are one complex number (``view_as_complex``), then a real pair
    again (``view_as_real``) for c."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 2)
        self.c = nn.Linear(2, 3)

    def forward(self, x):
        z = torch.view_as_complex(self.b(torch.relu(self.a(x))).reshape(-1, 1, 2))
        return self.c(torch.view_as_real(z * (1 + 1j)).reshape(-1, 2))


def test_channels_read_as_a_complex_pair_freeze_naming_it():
    x = torch.randn(5, 4)
    traced = Traced(PairHead().eval(), x)
    assert [str(r) for r in traced.reasons('b')] == [
        '[shape] ViewAsComplexBackward0: reads channels as (real, imaginary) pairs; after b; '
        'before c']
    assert traced.group_of('a').prunable
