"""A layer's own weight or bias read by the model's code outside the layer's call: each of
its dims follows the layer's channels on that dim, read off the layer's kind
(``tracing/layer_params.py``), or freezes.

Before, the read gave the parameter slots tied to nothing: the code's ops bound them to
what the parameter met, pruning sliced it with its layer, and the slim model silently
computed something else (``b * a.bias[:, None, None]`` pruned ``a`` and ``b`` apart,
``a.weight.sum()`` summed fewer entries), verify on or off, or failed to run.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import Traced
from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner

X = torch.randn(2, 3, 8, 8)
OUTPUT = '[output] MeanBackward1: channels of a model output'


class Net(nn.Module):
    """a and b (8 channels each) -> ``step`` -> pooled; dw (depthwise over a) and
    unused (never called) are there for ``step`` to read."""

    def __init__(self, step):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.unused = nn.Conv2d(3, 8, 1)
        self.head = nn.Conv2d(8, 4, 1)
        self.head2 = nn.Conv2d(8, 4, 1)
        self.step = step

    def forward(self, x):
        return self.step(self, self.a(x), self.b(x)).mean((2, 3))


def _net(step):
    torch.manual_seed(0)
    return Net(step).eval()


def _prepared(model, x):
    pruner = L1NormPruner(ratio=0.5, verify=False)  # the trace alone must be right
    pruner.prepare_from_supernet(model, x)
    return pruner


def _groups(traced):
    """``{group id: (layers, prunable, reasons)}``."""
    return {gid: (group.layers, group.prunable, [str(r) for r in group.frozen_reasons])
            for gid, group in traced.groups.groups.items()}


def test_a_bias_read_outside_its_layer_prunes_with_the_layer():
    """a.bias's dim 0 holds a's output channels: b, which it scales, prunes with a."""
    model = _net(lambda m, a, b: m.head(a) + m.head2(b * m.a.bias[:, None, None]))
    assert _groups(Traced(model, X)) == {'b': (['b', 'a'], True, []),
                                         'head2': (['head2', 'head'], False, [OUTPUT])}
    pruner = _prepared(model, X)
    assert list(pruner.groups.prunable) == ['b']
    slim = sample_and_deploy(pruner, model, X)
    assert (slim.a.out_channels, slim.b.out_channels, slim.a.bias.shape) == (4, 4, (4, ))


def test_a_weight_summed_outside_its_layer_keeps_the_layer_whole():
    """a.weight.sum() adds up a's output channels, which the masked model keeps
    non-zero in the weight: a's group is one a sum reads, and the pruner's check on the
    model freezes it, saying so."""
    model = _net(lambda m, a, b: m.head(a) + m.head2(b) * m.a.weight.sum())
    traced = Traced(model, X)
    assert traced.groups.summed == ['a']
    pruner = _prepared(model, X)
    assert list(pruner.groups.prunable) == ['b']
    (reason, ) = pruner.groups.groups['a'].frozen_reasons
    assert reason.message.endswith('a sum over these channels reads them where pruning '
                                   'leaves them non-zero')
    slim = sample_and_deploy(pruner, model, X)
    assert (slim.a.out_channels, slim.b.out_channels) == (8, 4)


def test_a_parameter_of_a_layer_never_called_freezes_what_it_meets():
    """unused never runs, so its pruning slices nothing: b, which its bias scales, stays
    whole, the bias named (before, b was pruned and the slim model failed)."""
    model = _net(lambda m, a, b: m.head(a) + m.head2(b * m.unused.bias[:, None, None]))
    assert _groups(Traced(model, X))['b'] == (['b'], False, [
        '[fixed] unused.bias: the code reads it, and its dim 0 holds no channels of unused '
        'that its pruning slices'])
    slim = sample_and_deploy(_prepared(model, X), model, X)
    assert (slim.a.out_channels, slim.b.out_channels) == (4, 8)


def test_a_parameter_whose_dims_its_kind_cannot_place_freezes_naming_it():
    """A depthwise conv's kind slices its outputs only with its inputs, so the probe of
    one axis fails: dw's channels (a's) and the channels its bias meets (b's) freeze."""
    model = _net(lambda m, a, b: m.head(m.dw(a)) + m.head2(b * m.dw.bias[:, None, None]))
    reason = ('[fixed] dw.bias: the code reads it, and ConvKind cannot say which of its dims '
              'hold the channels of dw (dw is a depthwise conv: it must keep the 1 output '
              'channel(s) of every kept input channel and no others)')
    groups = _groups(Traced(model, X))
    assert (groups['a'], groups['b']) == ((['a', 'dw'], False, [reason]),
                                          (['b'], False, [reason]))
    assert not _prepared(model, X).groups.prunable


class Tokens(nn.Module):
    """Logits against the embedding table (a tied output layer): ``F.linear(h,
    emb.weight)`` contracts h with the table's dim 1, the embedding's channels."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, ids):
        return F.linear(self.proj(self.emb(ids)).relu(), self.emb.weight)


def test_an_embedding_table_read_as_an_output_layer_prunes_with_what_it_meets():
    """proj's outputs meet emb.weight's dim 1 (emb's outputs), not its dim 0 (the
    vocabulary, frozen): one group (before, proj pruned apart and the slim model
    failed)."""
    torch.manual_seed(0)
    model, ids = Tokens().eval(), torch.randint(0, 10, (2, 5))
    traced = Traced(model, ids)
    assert _groups(traced) == {'emb': (['emb', 'proj'], True, [])}
    assert traced.classes('proj').tolist() == traced.classes('emb').tolist()
    slim = sample_and_deploy(_prepared(model, ids), model, ids)
    assert (slim.emb.weight.shape, slim.proj.weight.shape) == ((10, 4), (4, 4))


def test_a_weight_stored_in_by_out_is_placed_by_its_kind():
    """transformers' Conv1D stores its weight (in, out): ``b(x) @ c.weight`` contracts
    b's channels with c's inputs (a's outputs) and yields c's outputs."""
    conv1d = pytest.importorskip('transformers.pytorch_utils').Conv1D

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 6), nn.Linear(3, 6)
            self.c = conv1d(8, 6)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.c(self.a(x)) + self.b(x) @ self.c.weight)

    torch.manual_seed(0)
    model, x = Gpt().eval(), torch.randn(2, 5, 3)
    groups = _groups(Traced(model, x))
    assert (groups['b'][:2], groups['c'][:2]) == ((['b', 'a'], True), (['c'], True))
    slim = sample_and_deploy(_prepared(model, x), model, x)
    assert (slim.a.out_features, slim.b.out_features, slim.c.weight.shape) == (3, 3, (3, 4))


def test_a_layers_own_bias_added_in_its_forward_is_unaffected():
    """nn.Linear on a non-contiguous input adds its bias as an op of its own: the bias
    ties to the layer's outputs, which it already met there."""
    class Transposed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.head = nn.Linear(4, 8), nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.fc(x.transpose(1, 2)).relu())

    torch.manual_seed(0)
    model, x = Transposed().eval(), torch.randn(2, 4, 5)
    assert _groups(Traced(model, x))['fc'][:2] == (['fc'], True)
    assert sample_and_deploy(_prepared(model, x), model, x).fc.out_features == 4


class TiedDecoder(nn.Module):
    """An autoencoder whose decoder runs the encoder's weight in the other direction:
    ``z @ enc.weight`` (or, for a conv, ``F.conv_transpose2d(z, enc.weight)``) yields
    enc's input channels, not its outputs."""

    def __init__(self, conv=False):
        super().__init__()
        self.conv = conv
        if conv:
            self.pre, self.enc, self.post = (nn.Conv2d(3, 16, 3, padding=1),
                                             nn.Conv2d(16, 8, 3, padding=1), nn.Conv2d(16, 4, 1))
        else:
            self.pre, self.enc, self.post = nn.Linear(6, 16), nn.Linear(16, 8), nn.Linear(16, 4)

    def forward(self, x):
        h = self.pre(x).relu()
        z = self.enc(h).relu()
        back = F.conv_transpose2d(z, self.enc.weight, padding=1) if self.conv \
            else z @ self.enc.weight
        return self.post(back.relu() + h)


def test_a_linear_weight_multiplied_untransposed_is_no_call_of_its_layer():
    """``z @ enc.weight`` contracts enc's outputs with the weight's rows and yields its
    columns, enc's inputs (pre's channels): a product with the parameter, not enc's
    ``F.linear`` (before, it was traced as enc's own call, its output given enc's 8
    output channels, and tracing failed with ``cannot bind (8,) slots to (16,) slots``)."""
    torch.manual_seed(0)
    model, x = TiedDecoder().eval(), torch.randn(4, 6)
    groups = _groups(Traced(model, x))
    assert (groups['pre'][:2], groups['enc'][:2]) == ((['pre'], True), (['enc'], True))
    slim = sample_and_deploy(_prepared(model, x), model, x)
    assert (slim.pre.out_features, slim.enc.weight.shape) == (8, (4, 8))


def test_a_conv_weight_run_transposed_freezes_naming_its_layer():
    """``F.conv_transpose2d(z, enc.weight)`` swaps the roles of the weight's channel dims:
    no call of enc, so what it meets freezes, enc named (before, it was traced as enc's
    own call and tracing failed with ``cannot bind (8,) slots to (16,) slots``)."""
    torch.manual_seed(0)
    model, x = TiedDecoder(conv=True).eval(), torch.randn(2, 3, 8, 8)
    groups = _groups(Traced(model, x))
    reason = ('[mixing] ConvolutionBackward0: convolution runs the weight of enc otherwise '
              'than enc does; after enc; before post')
    assert groups['enc'] == (['enc'], False, [reason])
    assert not _prepared(model, x).groups.prunable


def test_a_square_linear_weight_in_another_layout_cannot_prune_its_layer_apart():
    """``addmm(enc.bias, m, enc.weight)`` contracts m with enc's outputs: traced as enc's
    own call (m bound to enc's inputs), enc's inputs and outputs, both 16 wide, pruned
    apart, and the slim model failed to run (``mat1 and mat2 shapes cannot be
    multiplied``).  Now the addmm freezes what it meets, enc named."""
    class Square(nn.Module):
        def __init__(self):
            super().__init__()
            self.pre, self.mid = nn.Linear(6, 16), nn.Linear(6, 16)
            self.enc, self.post = nn.Linear(16, 16), nn.Linear(16, 4)

        def forward(self, x):
            h = self.enc(self.pre(x).relu())
            return self.post(torch.addmm(self.enc.bias, self.mid(x).relu(), self.enc.weight) + h)

    torch.manual_seed(0)
    model, x = Square().eval(), torch.randn(4, 6)
    reason = ('[mixing] AddmmBackward0: addmm runs the weight of enc otherwise than enc '
              'does; after mid; before post')
    layers, prunable, reasons = _groups(Traced(model, x))['enc']
    assert (layers, prunable, reasons[0]) == (['enc'], False, reason)
    assert not _prepared(model, x).groups.prunable


def test_a_conv1d_weight_run_as_a_linear_weight_is_no_call_of_its_layer():
    """transformers' Conv1D runs ``addmm(bias, x, weight)``; ``F.linear(z, c.weight, b)``
    runs ``addmm(b, z, weight.t())``, which yields c's inputs (before, traced as c's own
    call, and tracing failed with ``cannot bind (8,) slots to (6,) slots``)."""
    conv1d = pytest.importorskip('transformers.pytorch_utils').Conv1D

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.c, self.head = nn.Linear(3, 6), conv1d(8, 6), nn.Linear(6, 2)

        def forward(self, x):
            h = self.a(x)
            return self.head(F.linear(self.c(h).relu(), self.c.weight, self.a.bias) + h)

    torch.manual_seed(0)
    model, x = Gpt().eval(), torch.randn(4, 3)
    reason = ('[mixing] AddmmBackward0: addmm runs the weight of c otherwise than c does; '
              'after c; before head')
    assert _groups(Traced(model, x))['c'] == (['c'], False, [reason])
    sample_and_deploy(_prepared(model, x), model, x)
