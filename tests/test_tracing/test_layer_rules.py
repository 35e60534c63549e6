"""Layer rules: conv / linear / embedding / norms, told apart by the module that owns them."""
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import Traced
from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner


def test_layer_grad_fn_names():
    x = torch.randn(2, 4, 6, 6)
    names = {
        'ConvolutionBackward0': [nn.Conv1d(4, 4, 1)(x[..., 0]), nn.Conv2d(4, 4, 1)(x),
                                 nn.Conv3d(4, 4, 1)(x[:, :, None]),
                                 nn.ConvTranspose2d(4, 4, 2)(x)],
        'AddmmBackward0': [nn.Linear(6, 3)(x[:, 0, 0])],
        'MmBackward0': [nn.Linear(6, 3, bias=False)(x[:, 0, 0])],
        'ViewBackward0': [nn.Linear(6, 3)(x[:, 0].contiguous())],
        'UnsafeViewBackward0': [nn.Linear(6, 3, bias=False)(x[:, 0])],
        'AddBackward0': [nn.Linear(6, 3)(x[:, 0])],  # non-contiguous input: mm, then + bias
        'EmbeddingBackward0': [nn.Embedding(5, 3)(torch.tensor([1, 2]))],
        'NativeBatchNormBackward0': [nn.BatchNorm2d(4)(x), nn.BatchNorm1d(4).eval()(x[..., 0])],
        'NativeLayerNormBackward0': [nn.LayerNorm(6)(x)],
        'NativeGroupNormBackward0': [nn.GroupNorm(2, 4)(x)],
        'PreluKernelBackward0': [nn.PReLU(4)(x)],
    }
    for name, outputs in names.items():
        assert [t.grad_fn.name() for t in outputs] == [name] * len(outputs)


class Seq(nn.Module):
    def __init__(self, *layers, tail=None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.tail = tail

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.tail(x) if self.tail else x


@pytest.mark.parametrize('conv,x', [
    (nn.Conv1d, torch.randn(1, 3, 8)), (nn.Conv2d, torch.randn(1, 3, 8, 8)),
    (nn.Conv3d, torch.randn(1, 3, 4, 8, 8)), (nn.ConvTranspose2d, torch.randn(1, 3, 8, 8)),
    (nn.ConvTranspose1d, torch.randn(1, 3, 8)), (nn.ConvTranspose3d, torch.randn(1, 3, 2, 4, 4))])
def test_conv_kinds(conv, x):
    traced = Traced(Seq(conv(3, 8, 1), conv(8, 4, 1)), x)
    group = traced.group_of('layers.0')
    assert group.prunable and group.consumers == ['layers.1']
    assert (traced.classes('layers.1', 'in') == traced.classes('layers.0')).all()


def test_depthwise_conv_is_bound_to_its_producer():
    traced = Traced(Seq(nn.Conv2d(3, 8, 1), nn.Conv2d(8, 16, 3, groups=8), nn.Conv2d(16, 4, 1)),
                    torch.randn(1, 3, 6, 6))
    assert (traced.classes('layers.1', 'out') == np.repeat(traced.classes('layers.0'), 2)).all()
    group = traced.group_of('layers.0')
    assert set(group.layers) == {'layers.0', 'layers.1'} and group.num_channels == 8


def test_group_conv_binds_channels_across_groups():
    traced = Traced(Seq(nn.Conv2d(3, 8, 1), nn.Conv2d(8, 12, 3, groups=4), nn.Conv2d(12, 4, 1)),
                    torch.randn(1, 3, 6, 6))
    producer = traced.classes('layers.0').reshape(4, 2)
    assert (producer == producer[0]).all()
    out = traced.classes('layers.1').reshape(4, 3)
    assert (out == out[0]).all()
    assert traced.group_of('layers.0').num_channels == 2
    assert traced.group_of('layers.1').num_channels == 3
    assert traced.group_of('layers.1').width == 12


def test_linear_2d_3d_with_and_without_bias():
    for bias in (True, False):
        flat = Traced(Seq(nn.Linear(6, 8, bias=bias), nn.ReLU(), nn.Linear(8, 3)),
                      torch.randn(2, 6))
        tokens = Traced(Seq(nn.Linear(6, 8, bias=bias), nn.ReLU(), nn.Linear(8, 3)),
                        torch.randn(2, 5, 6))
        strided = Traced(Seq(nn.Linear(6, 8, bias=bias), nn.ReLU(), nn.Linear(8, 3)),
                         torch.randn(2, 6, 5).transpose(1, 2))
        for traced in (flat, tokens, strided):
            assert traced.group_of('layers.0').consumers == ['layers.2']
            assert traced.group_of('layers.0').prunable
            assert traced.group_of('layers.0').params == []  # the bias goes with the layer


class FunctionalConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 1)
        self.weight = nn.Parameter(torch.randn(4, 8, 1, 1))

    def forward(self, x):
        return F.conv2d(self.a(x), self.weight)


def test_convolution_without_an_owning_conv_module_freezes():
    traced = Traced(FunctionalConv(), torch.randn(1, 3, 4, 4))
    (reason, ) = traced.reasons('a')
    assert reason.op == 'ConvolutionBackward0' and 'nn.Conv' in reason.message


def test_matmul_with_a_bare_weight_binds_the_parameter():
    class BareLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 8)
            self.w = nn.Parameter(torch.randn(8, 3))

        def forward(self, x):
            return self.a(x) @ self.w
    traced = Traced(BareLinear(), torch.randn(2, 4))
    assert traced.group_of('a').params == ['w']
    assert traced.group_of('a').prunable


def test_embedding_dim_is_a_prunable_output():
    class Emb(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.fc = nn.Embedding(10, 8), nn.Linear(8, 2)

        def forward(self, ids):
            return self.fc(self.emb(ids).mean(1))
    traced = Traced(Emb(), torch.tensor([[1, 2, 3]]))
    assert traced.group_of('emb').consumers == ['fc']


@pytest.mark.parametrize('norm,x', [
    (nn.BatchNorm1d(8), torch.randn(2, 3)), (nn.BatchNorm2d(8), torch.randn(1, 3, 4, 4)),
    (nn.BatchNorm2d(8, affine=False), torch.randn(1, 3, 4, 4)),
    (nn.GroupNorm(1, 8), torch.randn(1, 3, 4, 4)), (nn.GroupNorm(8, 8), torch.randn(1, 3, 4, 4)),
    (nn.GroupNorm(4, 8, affine=False), torch.randn(1, 3, 4, 4)),
    (nn.LayerNorm(8, elementwise_affine=False), torch.randn(2, 3))])
def test_norms_follow_their_input(norm, x):
    first = nn.Linear(3, 8) if x.dim() == 2 else nn.Conv2d(3, 8, 1)
    traced = Traced(Seq(first, norm, tail=lambda y: y.sum()), x)
    assert traced.group_of('layers.0').norms == ['layers.1']


class _Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, y):
        return self.fn(y)


def _channels_last_layer_norm(y):
    return F.layer_norm(y.permute(0, 2, 3, 1), y.shape[1:2]).permute(0, 3, 1, 2)


@pytest.mark.parametrize('norm, why', [
    (lambda y: F.group_norm(y, 4), 'group norm without a module'),
    (_channels_last_layer_norm, 'layer norm without a module')])
def test_a_functional_norm_over_the_channels_freezes_them(norm, why):
    """Its statistics span the channels: a masked model would count the pruned channels
    as zeros, a slim one would not count them at all.  (A norm module, with or without
    affine parameters, is its layer kind's: it keeps the statistics of the kept
    channels.)"""
    traced = Traced(Seq(nn.Conv2d(3, 8, 1), _Lambda(norm), nn.Conv2d(8, 4, 1),
                        tail=lambda y: y.sum()), torch.randn(1, 3, 4, 4))
    assert not traced.group_of('layers.0').prunable
    assert [why in reason.message for reason in traced.reasons('layers.0')] == [True]


@pytest.mark.parametrize('norm', [lambda y: F.instance_norm(y),
                                  lambda y: F.batch_norm(y, None, None, training=True)])
def test_a_norm_without_affine_parameters_per_channel_passes_them(norm):
    traced = Traced(Seq(nn.Conv2d(3, 8, 1), _Lambda(norm), nn.Conv2d(8, 4, 1),
                        tail=lambda y: y.sum()), torch.randn(2, 3, 4, 4))
    assert traced.group_of('layers.0').prunable
    assert traced.group_of('layers.0').consumers == ['layers.2']


def test_group_norm_binds_across_its_groups():
    traced = Traced(Seq(nn.Conv2d(3, 8, 1), nn.GroupNorm(4, 8), tail=lambda y: y.sum()),
                    torch.randn(1, 3, 4, 4))
    classes = traced.classes('layers.0').reshape(4, 2)
    assert (classes == classes[0]).all()


def test_layer_norm_channels_last_and_multi_dim():
    last = Traced(Seq(nn.Linear(3, 8), nn.LayerNorm(8), tail=lambda y: y.sum()),
                  torch.randn(2, 5, 3))
    assert last.group_of('layers.0').norms == ['layers.1']
    multi = Traced(Seq(nn.Conv2d(3, 8, 1), nn.LayerNorm([8, 4, 4]), tail=lambda y: y.sum()),
                   torch.randn(1, 3, 4, 4))
    assert [r.op for r in multi.reasons('layers.0')] == ['NativeLayerNormBackward0']


def test_prelu_follows_the_channels_by_its_kind():
    traced = Traced(Seq(nn.Conv2d(3, 8, 1), nn.PReLU(8), tail=lambda y: y.sum()),
                    torch.randn(1, 3, 4, 4))
    group = traced.group_of('layers.0')
    assert group.norms == ['layers.1'] and not group.params
    assert (traced.classes('layers.1', 'norm') == traced.classes('layers.0')).all()
    shared = Traced(Seq(nn.Conv2d(3, 8, 1), nn.PReLU(), tail=lambda y: y.sum()),
                    torch.randn(1, 3, 4, 4))
    group = shared.group_of('layers.0')
    assert group.prunable and not group.params and not group.norms


class _OwnMatmulLinear(nn.Linear):
    """A Linear subclass with its own forward (Falcon's ``FalconLinear``)."""

    def __init__(self, *args, transpose: str = 'T', **kwargs):
        super().__init__(*args, **kwargs)
        self.transpose = transpose

    def forward(self, x):
        weight = {'T': lambda w: w.T, 'mT': lambda w: w.mT, 't': lambda w: w.t()}[
            self.transpose](self.weight)
        out = x @ weight
        return out if self.bias is None else out + self.bias


@pytest.mark.parametrize('bias', [True, False], ids=['bias', 'no bias'])
@pytest.mark.parametrize('transpose', ['T', 'mT', 't'])
def test_a_linear_subclass_multiplying_by_its_transposed_weight_is_a_linear(transpose, bias):
    from masked_vs_slim import sample_and_deploy
    from razorlib.pruning import L1NormPruner
    torch.manual_seed(0)
    model = Seq(_OwnMatmulLinear(3, 8, bias=bias, transpose=transpose), nn.ReLU(),
                _OwnMatmulLinear(8, 2, bias=bias, transpose=transpose))
    x = torch.randn(2, 5, 3)
    traced = Traced(model, x)
    group = traced.group_of('layers.0')
    assert group.prunable and group.num_channels == 8 and group.consumers == ['layers.2']
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    slim = sample_and_deploy(pruner, model, x)  # masked == slim, params exact
    assert (slim.layers[0].out_features, slim.layers[2].in_features) == (4, 4)


class _Lookup(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.emb, self.fc = nn.Embedding(20, 8, **kwargs), nn.Linear(8, 4)

    def forward(self, ids):
        return self.fc(self.emb(ids))


def test_an_embedding_with_max_norm_freezes_its_channels():
    ids = torch.arange(10).view(2, 5)
    assert Traced(_Lookup(), ids).group_of('emb').prunable
    (reason, ) = Traced(_Lookup(max_norm=1.0), ids).reasons('emb')
    assert (reason.kind, reason.op) == ('mixing', 'EmbeddingBackward0')
    assert reason.message == ('emb renormalises each looked-up row over its embedding_dim '
                              '(max_norm=1.0), which a slim table would take over the kept '
                              'channels only')


class _TokenMixer(nn.Module):
    """A Linear over the tokens of ``(B, T, C)``: the channels of ``emb`` are its rows."""

    def __init__(self):
        super().__init__()
        self.emb, self.tok, self.out = nn.Linear(6, 8), nn.Linear(5, 7), nn.Linear(8, 3)

    def forward(self, x):
        h = F.relu(self.emb(x))
        return self.out(self.tok(h.transpose(1, 2)).transpose(1, 2))


class _BatchFolded(nn.Module):
    """One 3x3 filter shared by every channel, the channels folded into the batch."""

    def __init__(self):
        super().__init__()
        self.c, self.blur = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(1, 1, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.c(x))
        b, c, h, w = y.shape
        return self.blur(y.reshape(b * c, 1, h, w)).reshape(b, c, h, w).mean((2, 3))


class _OverLength(nn.Module):
    """A Linear over the length of ``(B, C, L)``, then a mean over the channels."""

    def __init__(self):
        super().__init__()
        self.c, self.tok, self.out = nn.Conv1d(3, 8, 1), nn.Linear(16, 12), nn.Linear(12, 4)

    def forward(self, x):
        return self.out(self.tok(F.relu(self.c(x))).mean(1))


@pytest.mark.parametrize('model, x, frozen', [
    (_TokenMixer, torch.randn(2, 5, 6), {
        'emb': ('MmBackward0', 'channels reach dim 0 of tok, which is not its channel dim 1'),
        'tok': ('MmBackward0', 'channels reach dim 0 of out, which is not its channel dim 1')}),
    (_BatchFolded, torch.randn(2, 3, 8, 8), {
        'c': ('ConvolutionBackward0',
              'channels reach dim 0 of blur, which is not its channel dim 1')}),
    (_OverLength, torch.randn(2, 3, 16), {
        'c': ('AddmmBackward0', 'channels reach dim 0 of tok, which is not its channel dim 1')}),
])
def test_channels_on_another_dim_of_a_layer_input_freeze_naming_it(model, x, frozen):
    traced = Traced(model(), x)
    for name, (op, message) in frozen.items():
        assert [(r.kind, r.op, r.message) for r in traced.reasons(name)
                if r.kind == 'shape'] == [('shape', op, message)]


#: Norms applied to the model input itself (an input-normalising layer before the stem).
NORMS_FIRST = {
    'BatchNorm2d': (lambda: nn.BatchNorm2d(3), (2, 3, 8, 8)),
    'GroupNorm': (lambda: nn.GroupNorm(1, 3), (2, 3, 8, 8)),
    'InstanceNorm2d': (lambda: nn.InstanceNorm2d(3, affine=True), (2, 3, 8, 8)),
    'LayerNorm': (lambda: nn.LayerNorm(3), (2, 5, 3)),
    'BatchNorm1d': (lambda: nn.BatchNorm1d(3), (2, 3)),
}


@pytest.mark.parametrize('name', NORMS_FIRST)
def test_a_norm_on_the_model_input_keeps_its_channels_and_the_rest_prunes(name):
    """The model input has no traced shape: the norm's channels are the input's, which
    no pruning reaches (they crashed the trace with a TypeError on the missing shape)."""
    build, shape = NORMS_FIRST[name]
    torch.manual_seed(0)
    layer = nn.Linear(3, 8) if len(shape) != 4 else nn.Conv2d(3, 8, 1)
    head = nn.Linear(8, 4) if len(shape) != 4 else nn.Conv2d(8, 4, 1)
    model = nn.Sequential(build(), layer, nn.ReLU(), head).eval()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, torch.randn(shape))
    assert list(pruner.groups.prunable) == ['1']
    slim = sample_and_deploy(pruner, model, torch.randn(shape))
    assert slim[1].weight.shape[:2] == (4, 3)
