"""One planner per module kind: exact shapes, values and the errors that protect them."""
import pytest
import torch
import torch.nn as nn

from razorlib.pruning import ChannelConfig, ChannelSelection, slim_model


def sel(raw, *index):
    return ChannelSelection(raw, tuple(index))


def slim(module, **axes):
    net = nn.Sequential(module)
    return slim_model(net, ChannelConfig({'0': axes}))[0]


def test_conv_keeps_rows_and_columns():
    conv = nn.Conv2d(4, 6, 3)
    weight, bias = conv.weight.detach().clone(), conv.bias.detach().clone()
    out = slim(conv, **{'in': sel(4, 0, 3), 'out': sel(6, 1, 2, 5)})
    assert (out.in_channels, out.out_channels) == (2, 3)
    assert torch.equal(out.weight, weight[[1, 2, 5]][:, [0, 3]])
    assert torch.equal(out.bias, bias[[1, 2, 5]])
    assert out.weight.requires_grad


def test_depthwise_with_multiplier():
    conv = nn.Conv2d(4, 8, 3, groups=4)
    weight = conv.weight.detach().clone()
    out = slim(conv, **{'in': sel(4, 1, 3), 'out': sel(8, 2, 3, 6, 7)})
    assert (out.in_channels, out.out_channels, out.groups) == (2, 4, 2)
    assert torch.equal(out.weight, weight[[2, 3, 6, 7]])
    with pytest.raises(ValueError, match='depthwise conv: it must keep the 2 output'):
        slim(nn.Conv2d(4, 8, 3, groups=4), **{'in': sel(4, 1, 3), 'out': sel(8, 2, 6, 7)})


def test_group_conv_needs_the_same_positions_in_every_group():
    conv = nn.Conv2d(8, 4, 1, groups=2)
    weight = conv.weight.detach().clone()
    out = slim(conv, **{'in': sel(8, 1, 2, 5, 6), 'out': sel(4, 0, 2)})
    assert (out.in_channels, out.out_channels, out.groups) == (4, 2, 2)
    assert torch.equal(out.weight, weight[[0, 2]][:, [1, 2]])
    with pytest.raises(ValueError, match='group conv/norm with 2 groups'):
        slim(nn.Conv2d(8, 4, 1, groups=2), **{'in': sel(8, 1, 2, 4, 6)})


def test_conv_transpose_weight_layout():
    conv = nn.ConvTranspose2d(4, 6, 2)
    weight = conv.weight.detach().clone()  # (in, out, k, k)
    out = slim(conv, **{'in': sel(4, 0, 1), 'out': sel(6, 3, 4, 5)})
    assert torch.equal(out.weight, weight[[0, 1]][:, [3, 4, 5]])
    assert out(torch.randn(1, 2, 3, 3)).shape == (1, 3, 4, 4)


def test_linear_norms_embedding():
    linear = slim(nn.Linear(5, 4), **{'in': sel(5, 0, 4), 'out': sel(4, 3)})
    assert linear.weight.shape == (1, 2) and linear.in_features == 2
    bn = nn.BatchNorm2d(4)
    bn.running_mean.copy_(torch.arange(4.))
    bn = slim(bn, out=sel(4, 1, 3))
    assert bn.num_features == 2 and bn.running_mean.tolist() == [1.0, 3.0]
    ln = slim(nn.LayerNorm(6), out=sel(6, 0, 5))
    assert ln.normalized_shape == (2, ) and ln(torch.randn(3, 2)).shape == (3, 2)
    with pytest.raises(ValueError, match='only a LayerNorm over one dim'):
        slim(nn.LayerNorm([6, 2]), out=sel(6, 0))
    gn = slim(nn.GroupNorm(2, 8), out=sel(8, 0, 1, 4, 5))
    assert (gn.num_groups, gn.num_channels) == (2, 4)
    inorm_like = slim(nn.GroupNorm(4, 4), out=sel(4, 0, 3))
    assert inorm_like.num_groups == 2
    emb = slim(nn.Embedding(10, 6), out=sel(6, 1, 2))
    assert emb.embedding_dim == 2 and emb(torch.tensor([3])).shape == (1, 2)


def test_unsupported_module():
    with pytest.raises(ValueError, match='0: razorlib cannot slice a ReLU'):
        slim(nn.ReLU(), out=sel(4, 0))


def test_bare_parameters_and_buffers():
    holder = nn.Module()
    holder.gamma = nn.Parameter(torch.arange(6.))
    holder.register_buffer('scale', torch.arange(12.).reshape(2, 6))
    net = nn.Sequential(holder)
    slim_model(net, ChannelConfig({}, {'0.gamma': {0: sel(6, 1, 4)}, '0.scale': {1: sel(6, 0, 5)}}))
    assert isinstance(holder.gamma, nn.Parameter) and holder.gamma.tolist() == [1.0, 4.0]
    assert holder.scale.tolist() == [[0.0, 5.0], [6.0, 11.0]]


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.embed.weight


def test_tied_weights_sliced_alike_stay_tied():
    model = TiedLM()
    keep = ChannelSelection(8, (0, 2, 5))
    slim_model(model, ChannelConfig({'embed': {'out': keep}, 'head': {'in': keep}}))
    assert model.head.weight is model.embed.weight
    assert model.embed.weight.shape == (10, 3)


def test_tied_weights_sliced_apart_are_refused_and_the_model_untouched():
    model = TiedLM()
    dense = model.embed.weight
    with pytest.raises(ValueError, match=r'tied parameters would be sliced apart: '
                       r'embed.weight \(10, 3\), head.weight \(10, 8\)'):
        slim_model(model, ChannelConfig({'embed': {'out': ChannelSelection(8, (0, 2, 5))}}))
    assert model.embed.weight is dense and model.head.weight is dense
