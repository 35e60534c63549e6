"""FLOPs / params against hand-computed counts, for dense, masked and slimmed models."""
import copy
import functools

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrizations

import razorlib
from razorlib.pruning import L1NormPruner
from razorlib.utils import count_params, get_model_complexity
from razorlib.utils.complexity import einsum_macs
from razorlib.utils.kept_rows import joined_rows, rolled_rows, split_rows
from zoo import ZOO


def flops_of(module, x):
    per = {}
    get_model_complexity(nn.Sequential(module), x, per_module=per)
    return per['0']


def test_conv_depthwise_group_and_linear_by_hand():
    x = torch.randn(2, 8, 10, 10)
    # conv 8->16, 3x3, pad 1: 2*10*10 positions * 16 outputs * 8 inputs * 9
    assert flops_of(nn.Conv2d(8, 16, 3, padding=1), x) == 2 * 100 * 16 * 8 * 9
    # depthwise 8->8, 3x3 stride 2: 2*5*5 positions * 8 outputs * 1 input * 9
    assert flops_of(nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), x) == 2 * 25 * 8 * 9
    # group conv, 4 groups: each output reads 2 inputs
    assert flops_of(nn.Conv2d(8, 12, 1, groups=4), x) == 2 * 100 * 12 * 2
    # linear on tokens: 2*10 rows * 10 in * 6 out
    assert flops_of(nn.Linear(10, 6), torch.randn(2, 10, 10)) == 20 * 10 * 6
    # transposed conv 8->4, k=2 s=2: every input position scatters into 4 * 4 outputs
    assert flops_of(nn.ConvTranspose2d(8, 4, 2, stride=2), x) == 2 * 100 * 8 * 4 * 4
    # batch norm: one op per element
    assert flops_of(nn.BatchNorm2d(8), x) == x.numel()


def test_params_by_hand():
    assert count_params(nn.Conv2d(8, 16, 3)) == 16 * 8 * 9 + 16
    assert count_params(nn.Conv2d(8, 8, 3, groups=8, bias=False)) == 8 * 9
    assert count_params(nn.Conv2d(8, 12, 1, groups=4)) == 12 * 2 + 12
    assert count_params(nn.Linear(10, 6)) == 66


@pytest.mark.parametrize('name', sorted(ZOO))
def test_masked_supernet_counts_exactly_what_the_slim_model_has(name):
    entry = ZOO[name]
    torch.manual_seed(0)
    model = entry.build().eval()
    x = entry.example_inputs()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    pruner.set_subnet(pruner.sample_subnet())
    masked = get_model_complexity(model, x)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    sliced = get_model_complexity(slim, x)
    assert sliced.params == sum(p.numel() for p in slim.parameters())
    assert masked.params == sliced.params
    assert masked.flops == sliced.flops


def test_human_readable():
    c = get_model_complexity(nn.Conv2d(3, 8, 3), torch.randn(1, 3, 34, 34))
    assert str(c) == 'FLOPs 221.18k, params 224'


class _TiedWithBias(nn.Module):
    """lm_head (with a bias) shares the embeddings' weight; the hidden size is prunable."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)
        self.head = nn.Linear(8, 10)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        x = self.embed(ids)
        return self.head(x + self.fc2(torch.relu(self.fc1(x))))


def test_a_tied_weight_counts_once_at_its_kept_size():
    import copy

    from razorlib.pruning import L1NormPruner
    model, ids = _TiedWithBias().eval(), torch.randint(0, 10, (2, 5))
    assert count_params(model) == sum(p.numel() for p in model.parameters())
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, ids)
    pruner.set_subnet(pruner.sample_subnet())
    masked = count_params(model)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert slim.head.weight is slim.embed.weight and slim.embed.weight.shape == (10, 4)
    assert masked == sum(p.numel() for p in slim.parameters())


@pytest.mark.parametrize('wrap', [parametrizations.weight_norm, parametrizations.spectral_norm,
                                  nn.utils.weight_norm])
def test_a_layer_with_a_computed_weight_counts_the_parameters_it_holds(wrap):
    """weight or spectral norm computes the weight from parameters of other shapes; such a
    layer stays whole, and a params budget is a fraction of what the model holds."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), wrap(nn.Conv2d(8, 16, 3)), nn.ReLU(),
                          nn.Conv2d(16, 16, 3), nn.ReLU(), nn.Conv2d(16, 5, 1))
    assert count_params(model) == sum(p.numel() for p in model.parameters())
    if wrap is nn.utils.weight_norm:
        return  # its module cannot be deep-copied, which razorlib.prune does
    pruned = razorlib.prune(model, torch.randn(1, 3, 12, 12), params=0.6)
    assert count_params(pruned) == sum(p.numel() for p in pruned.parameters()) <= \
        0.6 * count_params(model)


@pytest.mark.parametrize('layer, x, macs', [
    (nn.Conv2d(3, 5, 3), torch.randn(3, 8, 8), 36 * 5 * 27),  # 6x6 outputs, batch of one
    (nn.Conv1d(3, 5, 3), torch.randn(3, 10), 8 * 5 * 9),
    (nn.ConvTranspose2d(3, 5, 3), torch.randn(3, 8, 8), 64 * 3 * 5 * 9),
])
def test_an_unbatched_conv_input_is_a_batch_of_one(layer, x, macs):
    assert flops_of(layer, x) == macs == flops_of(layer, x[None])


@pytest.mark.parametrize('norm, params', [(nn.LayerNorm((5, 6)), 60), (nn.RMSNorm((5, 6)), 30)])
def test_a_norm_over_several_dims_counts_every_affine_entry(norm, params):
    assert count_params(norm) == params == sum(p.numel() for p in norm.parameters())


class ScaledConv(nn.Conv2d):
    """A conv with a learned gain per output channel (timm's ScaledStdConv2d)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gain = nn.Parameter(torch.ones(self.out_channels, 1, 1, 1))

    def forward(self, x):
        return self._conv_forward(x, self.weight * self.gain, self.bias)


def test_a_parameter_the_layer_kind_does_not_know_is_counted():
    conv = ScaledConv(4, 8, 3)
    assert count_params(conv) == 8 * 4 * 9 + 8 + 8
    assert flops_of(conv, torch.randn(1, 4, 6, 6)) == 16 * 8 * 4 * 9  # once, by its kind


class Functional(nn.Module):
    """Weights run as functions outside their modules' calls (torchvision's Swin runs its
    qkv Linear so) and a bare parameter as a matrix."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 6)
        self.proj = nn.Parameter(torch.randn(4, 5))
        self.direct = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        y = self.direct.forward(y).mean((2, 3))  # no hooks run
        return F.linear(y, self.fc.weight, self.fc.bias), y @ self.proj


def test_weight_layers_run_as_functions_are_counted_once():
    per = {}
    total = get_model_complexity(Functional(), torch.randn(2, 3, 5, 5), per_module=per).flops
    conv, direct, fc, proj = 2 * 9 * 4 * 27, 2 * 9 * 4 * 4, 2 * 4 * 6, 2 * 4 * 5
    assert per == {'conv': conv, 'direct': direct, 'fc': fc, '<functional>': proj}
    assert total == conv + direct + fc + proj
    assert get_model_complexity(Functional(), torch.randn(2, 3, 5, 5), attention=True).flops \
        == total  # a product with a weight is no attention product


class Projected(nn.Module):
    """A bare parameter as the classifier: its rows (or, stored transposed, its columns)
    go with the conv's channels."""

    def __init__(self, transposed=False):
        super().__init__()
        self.conv, self.transposed = nn.Conv2d(3, 8, 3), transposed
        self.proj = nn.Parameter(torch.randn(5, 8) if transposed else torch.randn(8, 5))

    def forward(self, x):
        return self.conv(x).relu().mean((2, 3)) @ (self.proj.T if self.transposed else self.proj)


@pytest.mark.parametrize('transposed', [False, True])
def test_a_bare_parameter_product_counts_its_kept_entries_as_its_slim_model_does(transposed):
    model, x = Projected(transposed), torch.randn(2, 3, 5, 5)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    pruner.set_subnet(pruner.sample_subnet())
    per = {}
    masked = get_model_complexity(model, x, per_module=per).flops
    assert per['<functional>'] == 2 * 4 * 5  # 2 rows, 4 of 8 channels kept, 5 outputs
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert slim.proj.shape == ((5, 4) if transposed else (4, 5))
    assert get_model_complexity(slim, x).flops == masked


class Transposed(nn.Module):
    """Weights read through a transposed view: a Linear's weight outside its call and a
    bare parameter stored (outputs, inputs) as ``nn.Linear`` stores its weight."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 6)
        self.proj = nn.Parameter(torch.randn(5, 8))

    def forward(self, x):
        y = self.conv(x).relu().mean((2, 3))
        return y @ self.fc.weight.T, y @ self.proj.mT


def test_a_product_with_a_transposed_weight_is_counted_as_the_weight_s():
    model, x = Transposed(), torch.randn(2, 3, 5, 5)
    per = {}
    total = get_model_complexity(model, x, per_module=per).flops
    conv = 2 * 9 * 8 * 27
    assert per == {'conv': conv, 'fc': 2 * 8 * 6, '<functional>': 2 * 8 * 5}
    assert get_model_complexity(model, x, attention=True).flops == total  # no attention


class TiedDecoder(nn.Module):
    """The decoder runs the encoder's weight transposed, with the encoder pruned too."""

    def __init__(self):
        super().__init__()
        self.pre, self.enc, self.post = nn.Linear(6, 16), nn.Linear(16, 8), nn.Linear(16, 4)

    def forward(self, x):
        h = self.pre(x).relu()
        return self.post(F.linear(self.enc(h).relu(), self.enc.weight.t()).relu() + h)


def test_a_pruned_layer_s_weight_run_by_code_counts_its_kept_weight_as_the_slim_model():
    """The decoder's product costs the kept share of enc's weight: 4 rows x 4 of 8 x 8 of
    16 entries.  Before, it took the kept share of enc's parameters, its bias (kept with
    its outputs alone) among them: 36 of 136, not 32 of 128, and counted 136 for 128."""
    torch.manual_seed(0)
    model, x = TiedDecoder().eval(), torch.randn(4, 6)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    assert sorted(pruner.groups.prunable) == ['enc', 'pre']
    pruner.set_subnet(pruner.subnet_at(0.5))
    per = {}
    masked = get_model_complexity(model, x, per_module=per).flops
    assert per['enc'] == 4 * 8 * 4 * 2  # its own call and the decoder's
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert get_model_complexity(slim, x).flops == masked


class Attention(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def forward(self, q, k, v):
        if self.mode == 'einsum':
            scores = torch.einsum('bhqd,bhkd->bhqk', q, k).softmax(-1)
            return torch.einsum('bhqk,bhkd->bhqd', scores, v)
        if self.mode == 'baddbmm':  # HF Bloom's
            q, k, v = (t.flatten(0, 1) for t in (q, k, v))
            scores = torch.baddbmm(torch.zeros(len(q), q.shape[1], k.shape[1]), q,
                                   k.transpose(1, 2))
            return torch.bmm(scores.softmax(-1), v)
        return (q @ k.transpose(-2, -1)).softmax(-1) @ v


@pytest.mark.parametrize('mode', ['matmul', 'einsum', 'baddbmm'])
def test_attention_products_by_any_op(mode):
    q = k = v = torch.randn(3, 2, 5, 4)  # batch 3, 2 heads, 5 tokens, head dim 4
    count = get_model_complexity(Attention(mode), (q, k, v), attention=True)
    assert count.flops == 2 * 3 * 2 * 5 * 5 * 4  # QK^T and AV
    assert get_model_complexity(Attention(mode), (q, k, v)).flops == 0


class BilinearNet(nn.Module):
    """An ``nn.Bilinear`` between two Linears; it has no layer kind (its channels stay
    whole), yet it is the model's costliest layer."""

    def __init__(self):
        super().__init__()
        self.a, self.c = nn.Linear(3, 8), nn.Linear(3, 6)
        self.bil, self.b = nn.Bilinear(8, 6, 8), nn.Linear(8, 5)

    def forward(self, x):
        return self.b(F.relu(self.bil(F.relu(self.a(x)), F.relu(self.c(x)))))


def test_a_bilinear_layer_costs_one_in1_by_in2_product_per_output():
    """Counted as a Linear is: each of the 4 rows' 8 outputs costs 8 x 6 multiply-adds."""
    per = {}
    total = get_model_complexity(BilinearNet(), torch.randn(4, 3), per_module=per).flops
    bilinear = 4 * 8 * 6 * 8
    assert per == {'a': 4 * 3 * 8, 'c': 4 * 3 * 6, '<functional>': bilinear, 'b': 4 * 8 * 5}
    assert total == sum(per.values())
    pair = (torch.randn(4, 8), torch.randn(4, 6))
    assert get_model_complexity(nn.Bilinear(8, 6, 8), pair).flops == bilinear


class KeywordAttention(nn.Module):
    """An ``nn.MultiheadAttention`` whose keys and values (4 wide) differ from its queries
    (16 wide), called with its arguments by position, by keyword or by keyword out of
    order."""

    def __init__(self, call):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True, kdim=4, vdim=4)
        self.call = call

    def forward(self, q, kv):
        if self.call == 'positional':
            return self.mha(q, kv, kv, need_weights=False)[0]
        if self.call == 'keyword':
            return self.mha(query=q, key=kv, value=kv, need_weights=False)[0]
        return self.mha(key=kv, value=kv, query=q, need_weights=False)[0]


@pytest.mark.parametrize('call', ['positional', 'keyword', 'reordered'])
def test_attention_counts_its_inputs_by_name_however_they_are_passed(call):
    q, kv = torch.randn(2, 3, 16), torch.randn(2, 50, 4)
    # q (6 tokens) and out projections 16 x 16; k and v (100 tokens) projections 4 x 16
    assert get_model_complexity(KeywordAttention(call), (q, kv)).flops == \
        6 * 16 * 16 + 2 * 100 * 4 * 16 + 6 * 16 * 16


class KeywordLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, batch_first=True)

    def forward(self, x):
        return self.lstm(hx=None, input=x)[0]


def test_a_layer_called_by_keyword_reads_its_input_by_name():
    assert get_model_complexity(KeywordLSTM(), torch.randn(2, 5, 8)).flops == \
        2 * 5 * (64 * 8 + 64 * 16)


class Rewrapped(nn.Linear):
    """A Linear whose forward a decorator wrapped under another signature than it takes
    (``functools.wraps`` copies the Linear's ``(input)``)."""

    @functools.wraps(nn.Linear.forward)
    def forward(self, *args, **kwargs):
        return F.linear(kwargs['x'], self.weight, self.bias)


def test_a_call_that_does_not_fit_the_forward_s_signature_counts_in_call_order():
    """As transformers' deprecate_kwarg forwards do: the call's arguments as given."""
    class Caller(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = Rewrapped(4, 2)

        def forward(self, x):
            return self.fc(x=x)

    assert get_model_complexity(Caller(), torch.randn(3, 4)).flops == 3 * 4 * 2


class RenamedAttention(nn.MultiheadAttention):
    """An attention whose wrapped forward also takes an old keyword (``mask``), as
    transformers' deprecate_kwarg wraps one."""

    @functools.wraps(nn.MultiheadAttention.forward)
    def forward(self, *args, mask=None, **kwargs):
        return super().forward(*args, **kwargs)


def test_a_call_that_does_not_fit_places_the_keywords_the_forward_names():
    """query, key and value by name, the unknown ``mask`` after them: the count of a
    positional call (call order swapped query and key: +46%)."""
    torch.manual_seed(0)
    attention, x, kv = RenamedAttention(8, 2), torch.randn(5, 1, 8), torch.randn(7, 1, 8)

    class Caller(nn.Module):
        def __init__(self, by_keyword):
            super().__init__()
            self.attention, self.by_keyword = attention, by_keyword

        def forward(self, x):
            if self.by_keyword:
                return self.attention(key=kv, value=kv, query=x, mask=None)[0]
            return self.attention(x, kv, kv)[0]

    assert get_model_complexity(Caller(True), x).flops == \
        get_model_complexity(Caller(False), x).flops


class NormOverRows(nn.Module):
    """A norm whose rows (the dims it does not normalise) carry a pruned channel group:
    a conv's channels under a ``LayerNorm((H, W))``, or a Linear's heads under a norm of
    each head's ``head_dim`` (Qwen3's ``q_norm``), which the tracer walks op by op."""

    def __init__(self, per_head):
        super().__init__()
        self.per_head = per_head
        if per_head:
            self.a, self.norm, self.b = nn.Linear(8, 24), nn.RMSNorm(6), nn.Linear(24, 8)
        else:
            self.a, self.norm, self.b = nn.Conv2d(3, 8, 1), nn.LayerNorm((6, 6)), \
                nn.Conv2d(8, 4, 1)

    def forward(self, x):
        if not self.per_head:
            return self.b(self.norm(self.a(x)))
        batch, tokens, _ = x.shape
        heads = self.norm(self.a(x).view(batch, tokens, -1, 6))
        return self.b(heads.reshape(batch, tokens, -1))


def _masked_and_slim(per_head):
    torch.manual_seed(0)
    model = NormOverRows(per_head).eval()
    x = torch.randn(2, 3, 8) if per_head else torch.randn(2, 3, 6, 6)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    assert list(pruner.channel_spaces) == ['a']  # the norm's rows are prunable
    pruner.set_subnet(pruner.subnet_at(0.5))
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    return model, slim, x


@pytest.mark.parametrize('per_head', [False, True])
def test_a_norm_over_pruned_rows_computes_what_its_slim_model_does(per_head):
    model, slim, x = _masked_and_slim(per_head)
    with torch.no_grad():
        torch.testing.assert_close(model(x), slim(x))
    per = {}
    get_model_complexity(slim, x, per_module=per)
    assert per['norm'] == (2 * 3 * 2 * 6 if per_head else 2 * 4 * 36)  # half the rows


@pytest.mark.parametrize('per_head', [False, True])
def test_a_norm_over_pruned_rows_counts_what_its_slim_model_has(per_head):
    """The norm has no mask of its rows: the masked model normalises all of them (576
    entries, 144 per head), and its count keeps only those of the kept channels, which
    the counter follows from the layer's out mask through the view to the norm."""
    model, slim, x = _masked_and_slim(per_head)
    masked, sliced = {}, {}
    total = get_model_complexity(model, x, per_module=masked).flops
    assert total == get_model_complexity(slim, x, per_module=sliced).flops
    assert masked == sliced and masked['norm'] == (2 * 3 * 2 * 6 if per_head else 2 * 4 * 36)


class NormOverRowsAfterOps(nn.Module):
    """conv -> BatchNorm -> ReLU -> ``LayerNorm((H, W))`` -> conv: the rows reach the norm
    through a norm with masks of its own and an op."""

    def __init__(self):
        super().__init__()
        self.a, self.bn = nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8)
        self.norm, self.b = nn.LayerNorm((6, 6)), nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.b(self.norm(torch.relu(self.bn(self.a(x)))))


def test_a_norm_over_pruned_rows_after_other_ops_counts_what_its_slim_model_has():
    torch.manual_seed(0)
    model, x = NormOverRowsAfterOps().eval(), torch.randn(2, 3, 6, 6)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    pruner.set_subnet(pruner.subnet_at(0.5))
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert slim.a.out_channels == 4
    masked, sliced = {}, {}
    assert get_model_complexity(model, x, per_module=masked).flops == \
        get_model_complexity(slim, x, per_module=sliced).flops == 2592
    assert masked == sliced == {'a': 72 * 4 * 3, 'bn': 288, 'norm': 288, 'b': 72 * 4 * 4}


class ShuffledHeads(nn.Module):
    """conv -> channel shuffle (``torch.channel_shuffle`` by keyword, ``nn.ChannelShuffle``
    or ShuffleNet's ``view`` / ``transpose`` / ``reshape``) -> heads of 2 channels under a
    ``LayerNorm((2, H, W))`` -> conv: the norm's rows are the heads, which are the conv's
    channels in their shuffled order."""

    def __init__(self, how):
        super().__init__()
        self.how, self.shuffle = how, nn.ChannelShuffle(2)
        self.a, self.norm, self.b = nn.Conv2d(3, 8, 1), nn.LayerNorm((2, 6, 6)), \
            nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = self.a(x)
        b, c, h, w = y.shape
        if self.how == 'function':
            y = torch.channel_shuffle(y, groups=2)
        elif self.how == 'module':
            y = self.shuffle(y)
        else:
            y = y.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)
        return self.b(self.norm(y.view(b, -1, 2, h, w)).view(b, c, h, w))


@pytest.mark.parametrize('how', ['function', 'module', 'view'])
def test_a_norm_over_shuffled_rows_counts_what_its_slim_model_has(how):
    """The conv keeps channels 0, 3, 4, 7, which the shuffle moves to heads 0 and 3: the
    norm counts those 2 of 4 heads (2 x 2 x 72), as the slim model's 2 heads.  The
    counter carried the unshuffled keep through ``channel_shuffle`` (heads 0 and 1 keeping
    one channel each, no grid of heads), so it counted all 4 heads' 576."""
    torch.manual_seed(0)
    model, x = ShuffledHeads(how).eval(), torch.randn(2, 3, 6, 6)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    pruner.set_subnet({'a': torch.tensor([True, False, False, True])})
    assert model.a.out_mask.flatten().tolist() == [1, 0, 0, 1, 1, 0, 0, 1]
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    with torch.no_grad():
        torch.testing.assert_close(model(x), slim(x))
    masked, sliced = {}, {}
    assert get_model_complexity(model, x, per_module=masked).flops == \
        get_model_complexity(slim, x, per_module=sliced).flops
    assert masked == sliced == {'a': 72 * 4 * 3, 'norm': 2 * 2 * 72, 'b': 72 * 4 * 4}


#: rolls of the 8 channels of dim 1 (one with a ReLU after it), and views of them as 4
#: heads of 2
ROLLS = {
    'by 1': lambda y: torch.roll(y, 1, 1),
    'by -3': lambda y: torch.roll(y, -3, 1),
    'Tensor.roll, dim -3': lambda y: y.roll(3, -3),
    'keywords, with a spatial dim': lambda y: torch.roll(input=y, shifts=(1, 2), dims=(1, -1)),
    'twice along dim 1': lambda y: y.roll((1, 2), (1, 1)),
    'by 1, then an op by keyword': lambda y: torch.relu(input=torch.roll(y, 1, 1)),
}
HEAD_VIEWS = {
    'view': lambda y, shape: y.view(shape),
    'reshape, keywords': lambda y, shape: torch.reshape(input=y, shape=shape),
    'Tensor.reshape, keyword': lambda y, shape: y.reshape(shape=shape),
}


class RolledHeads(nn.Module):
    """conv -> ``roll`` of its channels -> heads of 2 channels under a
    ``LayerNorm((2, H, W))`` -> conv: the norm's rows are the heads, which are the conv's
    channels in their rolled order (head 0 of a roll by 1: channels 7 and 0)."""

    def __init__(self, roll, view):
        super().__init__()
        self.roll, self.view = roll, view
        self.a, self.norm, self.b = nn.Conv2d(3, 8, 1), nn.LayerNorm((2, 6, 6)), \
            nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = self.roll(self.a(x))
        b, c, h, w = y.shape
        return self.b(self.norm(self.view(y, (b, -1, 2, h, w))).view(b, c, h, w))


@pytest.mark.parametrize('view', list(HEAD_VIEWS))
@pytest.mark.parametrize('roll', list(ROLLS))
def test_a_norm_over_rolled_rows_counts_what_its_slim_model_has(roll, view):
    """The roll keeps the channels it wraps around and the conv cuts one head of the
    others (6 of 8 channels kept): the norm counts the 3 of 4 heads that the rolled keep
    holds (3 x 2 x 72), as the slim model's 3 heads.  The counter carried the keep
    unrolled (kept channels no grid of heads) and counted all 4 heads' 576 (3600 against
    3456 in all), as it did the rows a roll, reshape or ReLU by keyword dropped."""
    torch.manual_seed(0)
    model, x = RolledHeads(ROLLS[roll], HEAD_VIEWS[view]).eval(), torch.randn(2, 3, 6, 6)
    slim = _pruned_in_half(model, x)
    assert slim.a.out_channels == 6
    masked, sliced = {}, {}
    assert get_model_complexity(model, x, per_module=masked).flops == \
        get_model_complexity(slim, x, per_module=sliced).flops == 3456
    assert masked == sliced == {'a': 72 * 6 * 3, 'norm': 3 * 2 * 72, 'b': 72 * 6 * 4}


def test_rolled_rows_roll_the_keep_of_each_dim_rolled():
    """Each dim rolled moves its keep by its shift (twice along one dim by both), the
    others keep theirs; a roll of the flattened tensor follows nothing."""
    rows = {1: np.array([True, True, False, False]), 2: np.array([True, False, False])}

    def rolled(*args, **kwargs):
        return {d: keep.tolist() for d, keep in rolled_rows(args, kwargs, rows, 3).items()}

    assert rolled(None, 1, 1) == rolled(None, (-3, 0), (-2, 0)) == \
        {1: [False, True, True, False], 2: [True, False, False]}
    assert rolled(None, shifts=(1, 1), dims=(1, 2)) == rolled(None, (-2, -3, 4), (2, 1, 1)) == \
        {1: [False, True, True, False], 2: [False, True, False]}
    assert rolled(None, 1) == rolled(input=None, shifts=(1, ), dims=None) == {}


class HeadsOf6(nn.Module):
    """Linear (8 -> 24) as 4 heads of 6, a per-head RMSNorm, Linear back to 8: what the
    fixtures below move the heads through between them (``heads``), as ``how`` says."""

    def __init__(self, how=None):
        super().__init__()
        self.how = how
        self.a, self.norm, self.b = nn.Linear(8, 24), nn.RMSNorm(6), nn.Linear(24, 8)

    def heads(self, x):
        """``a(x)`` as ``(B, N, 4, 6)``."""
        b, n, _ = x.shape
        return self.a(x).view(b, n, -1, 6)


class TransposedHeads(HeadsOf6):
    """Linear as heads of 6 -> ``torch.transpose`` of the heads and tokens, its second
    dim by keyword -> a per-head norm -> Linear."""

    def forward(self, x):
        b, n, _ = x.shape
        heads = torch.transpose(self.heads(x), 1, dim1=2)
        return self.b(self.norm(heads).transpose(1, 2).reshape(b, n, -1))


def test_a_transpose_with_a_dim_by_keyword_carries_the_rows():
    """The norm counts the 2 kept heads of 4 (2 x 2 x 3 x 6), as the slim model; the
    counter read both dims of the transpose by position or both by keyword, and failed
    with a ``TypeError`` on ``None % 4``."""
    torch.manual_seed(0)
    model, x = TransposedHeads().eval(), torch.randn(2, 3, 8)
    slim = _pruned_in_half(model, x)
    masked, sliced = {}, {}
    assert get_model_complexity(model, x, per_module=masked).flops == \
        get_model_complexity(slim, x, per_module=sliced).flops
    assert masked == sliced == {'a': 576, 'norm': 2 * 2 * 3 * 6, 'b': 576}


class HeadsAttention(nn.Module):
    """``q``/``k``/``v`` Linears viewed as heads of 4 (``kv`` key/value heads, repeated over
    the query heads as transformers' ``repeat_kv`` does, or paired by SDPA's
    ``enable_gqa`` in mode ``'sdpa_gqa'``), attention by ``mode``, an optional per-head
    norm of its output, the heads merged into ``o``.  Under ``heads='width'`` (``width``)
    the code views a fixed number of heads, so ``head_dim`` prunes instead."""

    def __init__(self, mode, kv=4, width=False, norm=False):
        super().__init__()
        self.mode, self.kv, self.width = mode, kv, width
        self.q, self.o = nn.Linear(16, 16), nn.Linear(16, 16)
        self.k, self.v = nn.Linear(16, kv * 4), nn.Linear(16, kv * 4)
        self.norm = nn.RMSNorm(4) if norm else None

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (layer(x).view(b, n, heads, -1) if self.width else layer(x).view(b, n, -1, 4)
                   for layer, heads in ((self.q, 4), (self.k, self.kv), (self.v, self.kv)))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.mode == 'sdpa_gqa':
            y = F.scaled_dot_product_attention(q, k, v, scale=0.5, enable_gqa=True)
        else:
            groups = q.shape[1] // k.shape[1]
            k, v = (t[:, :, None].expand(b, t.shape[1], groups, n, t.shape[-1])
                    .reshape(b, -1, n, t.shape[-1]) for t in (k, v))
            if self.mode == 'sdpa':
                y = F.scaled_dot_product_attention(q, k, v, scale=0.5)
            elif self.mode == 'einsum':
                scores = torch.einsum('bhld,bhsd->bhls', q, k) * 0.5
                y = torch.einsum('bhls,bhsd->bhld', scores.softmax(-1), v)
            else:
                y = (q @ k.transpose(-2, -1) * 0.5).softmax(-1) @ v
        y = self.norm(y) if self.norm is not None else y
        return self.o(y.transpose(1, 2).reshape(b, n, -1))


def _pruned_in_half(model, x, **pruner_kwargs):
    """``model`` masked to half of its one prunable group, and its slim copy."""
    torch.manual_seed(0)
    pruner = L1NormPruner(ratio=0.5, **pruner_kwargs)
    pruner.prepare_from_supernet(model, x)
    assert len(pruner.channel_spaces) == 1, pruner.groups
    pruner.set_subnet(pruner.subnet_at(0.5))
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    with torch.no_grad():
        torch.testing.assert_close(model(x), slim(x))
    return slim


@pytest.mark.parametrize('mode,kv,pruner_kwargs', [
    ('sdpa', 4, {}), ('matmul', 4, {}), ('einsum', 4, {}),
    ('sdpa', 4, {'heads': 'width'}), ('matmul', 4, {'heads': 'width'}),
    ('matmul', 2, {}), ('sdpa_gqa', 2, {}), ('sdpa_gqa', 2, {'gqa': 'query'}),
])
def test_attention_over_pruned_heads_counts_what_its_slim_model_has(mode, kv, pruner_kwargs):
    """A masked model's attention multiplies the zeros of its pruned heads (or ``head_dim``
    positions): its products count only the kept ones, as the slim model has them (half
    of the dense 2 x 4 x 3 x 3 x 4 for ``QK^T`` and as many for ``AV``), where it counted
    576 against the slim model's 288."""
    torch.manual_seed(0)
    model = HeadsAttention(mode, kv, width=pruner_kwargs.get('heads') == 'width').eval()
    x = torch.randn(2, 3, 16)
    slim = _pruned_in_half(model, x, **pruner_kwargs)
    masked, sliced = {}, {}
    assert get_model_complexity(model, x, per_module=masked, attention=True).flops == \
        get_model_complexity(slim, x, per_module=sliced, attention=True).flops
    assert masked == sliced and masked['<attention>'] == 288


def test_a_norm_over_pruned_heads_after_attention_counts_what_its_slim_model_has():
    """A per-head norm of ``softmax(QK^T) V``: the products carry the heads their operands
    keep to their output, so the norm counts the kept heads' rows (2 x 2 x 3 of 4; all 4
    heads' before)."""
    torch.manual_seed(0)
    model, x = HeadsAttention('matmul', norm=True).eval(), torch.randn(2, 3, 16)
    slim = _pruned_in_half(model, x)
    masked, sliced = {}, {}
    assert get_model_complexity(model, x, per_module=masked).flops == \
        get_model_complexity(slim, x, per_module=sliced).flops
    assert masked == sliced and masked['norm'] == 2 * 2 * 3 * 4


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


def test_split_multihead_attention_over_pruned_heads_counts_what_its_slim_model_has():
    """``nn.MultiheadAttention`` keeps its heads (so its count needs nothing); converted by
    ``split_multihead_attention`` its heads prune, and its attention counts the kept."""
    torch.manual_seed(0)
    model = razorlib.nn.split_multihead_attention(SelfAttention()).eval()
    x = torch.randn(2, 3, 16)
    slim = _pruned_in_half(model, x)
    masked, sliced = {}, {}
    assert get_model_complexity(model, x, per_module=masked, attention=True).flops == \
        get_model_complexity(slim, x, per_module=sliced, attention=True).flops
    assert masked == sliced and masked['<attention>'] == 288


def test_einsum_counts_the_summed_dims_at_their_broadcast_size():
    """A dim under ``...`` the output drops is summed, and a summed index broadcast from
    size 1 runs over the other operand's size (counted 12 and 3 before)."""
    x = torch.randn(2, 3, 4)
    assert einsum_macs('...ij->ij', (x, ), torch.einsum('...ij->ij', x)) == 24
    a, b = torch.randn(3, 4), torch.randn(3, 1)
    assert einsum_macs('ij,ij->i', (a, b), torch.einsum('ij,ij->i', a, b)) == 12


class KeywordSDPA(nn.Module):
    """``F.scaled_dot_product_attention(query=..., key=..., value=...)``: by keyword."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 3, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(query=q, key=k, value=v)


@pytest.mark.parametrize('attention', [False, True])
def test_attention_called_by_keyword_is_counted(attention):
    """The counter read q, k and v from the positional arguments only: a call by keyword
    failed to unpack (with attention=True before, and after the kept-rows change with
    either)."""
    per = {}
    get_model_complexity(KeywordSDPA(), torch.randn(2, 3, 8), attention=attention,
                         per_module=per)
    assert per.get('<attention>', 0) == (2 * 2 * 3 * 3 * 4 * 2 if attention else 0)  # 288


class ChunkedHeads(nn.Module):
    """ShuffleNet V2's unit: conv -> channel shuffle -> ``chunk(2, dim=1)``, the second
    piece as heads of 2 channels under a ``LayerNorm((2, H, W))`` -> concat -> conv."""

    def __init__(self):
        super().__init__()
        self.a, self.norm, self.b = nn.Conv2d(3, 8, 1), nn.LayerNorm((2, 6, 6)), \
            nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = torch.channel_shuffle(self.a(x), 2)
        b, c, h, w = y.shape
        y1, y2 = y.chunk(2, dim=1)
        y2 = self.norm(y2.reshape(b, -1, 2, h, w)).reshape(b, c // 2, h, w)
        return self.b(torch.cat([y1, y2], 1))


class UnequalSplitHeads(nn.Module):
    """Linear -> ``split`` into a quarter and the rest of its width (the sizes computed
    from it, so the slim model cuts at its kept channels) -> each part as heads of 4
    under a per-head norm -> concat -> Linear."""

    def __init__(self):
        super().__init__()
        self.a, self.norm, self.b = nn.Linear(8, 32), nn.RMSNorm(4), nn.Linear(32, 8)

    def forward(self, x):
        b, n, _ = x.shape
        y = self.a(x)
        width = y.shape[-1]
        parts = y.split([width // 4, width - width // 4], -1)
        return self.b(torch.cat([self.norm(p.view(b, n, -1, 4)).flatten(2) for p in parts], -1))


class TokenSplitHeads(HeadsOf6):
    """Linear as heads of 6 -> the tokens split unequally (``how``: sizes as a list with
    a negative dim, as an int, ``tensor_split`` at an index, ``tensor_split`` / ``chunk`` /
    ``unbind`` with every argument named, or ``hsplit`` / ``vsplit`` / ``dsplit``, whose
    names say the dim, on a layout with the tokens there) -> a per-head norm of each
    piece -> concat -> Linear: the dim cut holds no channels, the heads ride along."""

    def forward(self, x):
        b, n, _ = x.shape
        y = self.heads(x)
        if self.how == 'list':
            parts = y.split([1, 2], dim=-3)
        elif self.how == 'int':
            parts = torch.split(y, 2, 1)
        elif self.how == 'tensor_split':
            parts = torch.tensor_split(y, [1], dim=1)
        elif self.how == 'tensor_split_keywords':
            parts = torch.tensor_split(input=y, indices=[1], dim=1)
        elif self.how == 'chunk_keywords':
            parts = torch.chunk(input=y, chunks=2, dim=1)
        elif self.how == 'unbind_keywords':
            parts = [p.unsqueeze(1) for p in torch.unbind(input=y, dim=1)]
        elif self.how == 'hsplit':  # dim 1
            parts = torch.hsplit(y, [1])
        elif self.how == 'vsplit':  # dim 0
            parts = [p.transpose(0, 1) for p in y.transpose(0, 1).vsplit([1])]
        else:  # dsplit: dim 2
            parts = [p.transpose(1, 2) for p in torch.dsplit(y.transpose(1, 2), [1])]
        return self.b(torch.cat([self.norm(p) for p in parts], 1).reshape(b, n, -1))


class UnboundQKV(nn.Module):
    """timm's attention with ``qk_norm``: a fused ``qkv`` as ``(B, N, 3, heads, 4)``,
    its q, k and v taken apart (``how``: ``permute`` then ``unbind(0)``, ``unbind(-3)``
    then ``transpose``, or iterating the permuted tensor), a norm of each q and k head,
    attention, ``o``."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.qkv, self.o = nn.Linear(16, 48), nn.Linear(16, 16)
        self.q_norm, self.k_norm = nn.RMSNorm(4), nn.RMSNorm(4)

    def forward(self, x):
        b, n, _ = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, -1, 4)
        if self.how == 'unbind':
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        elif self.how == 'negative':
            q, k, v = (t.transpose(1, 2) for t in torch.unbind(qkv, -3))
        else:
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(self.q_norm(q), self.k_norm(k), v)
        return self.o(y.transpose(1, 2).reshape(b, n, -1))


@pytest.mark.parametrize('model,x,counts', [
    (ChunkedHeads, (2, 3, 6, 6), {'a': 864, 'norm': 2 * 72, 'b': 1152, '<attention>': 0}),
    (UnequalSplitHeads, (2, 3, 8), {'a': 768, 'norm': 2 * 3 * 4 * 4, 'b': 768,
                                    '<attention>': 0}),
    *[(functools.partial(TokenSplitHeads, how), (2, 3, 8),
       {'a': 576, 'norm': 2 * 3 * 2 * 6, 'b': 576, '<attention>': 0})
      for how in ('list', 'int', 'tensor_split', 'tensor_split_keywords', 'chunk_keywords',
                  'unbind_keywords', 'hsplit', 'vsplit', 'dsplit')],
    *[(functools.partial(UnboundQKV, how), (2, 3, 16),
       {'qkv': 2304, 'q_norm': 2 * 2 * 3 * 4, 'k_norm': 2 * 2 * 3 * 4, 'o': 768,
        '<attention>': 288})
      for how in ('unbind', 'negative', 'iterate')],
], ids=['chunk', 'unequal_split', 'tokens_list', 'tokens_int', 'tokens_tensor_split',
        'tokens_tensor_split_keywords', 'tokens_chunk_keywords', 'tokens_unbind_keywords',
        'tokens_hsplit', 'tokens_vsplit', 'tokens_dsplit', 'unbind', 'unbind_negative',
        'iterate'])
def test_rows_split_into_pieces_count_what_the_slim_model_has(model, x, counts):
    """The pieces of a split, chunk or unbind carry their slices of the kept rows (or the
    kept heads of the dims not cut): the norms and attention over them count the slim
    model's half, where the pieces carried none and they counted every row (ShuffleNet
    V2's chunk 288 against 144, timm's ``q_norm`` 96 against 48, attention 576 against
    288; the token pieces' norm 144 against 72 where the split named its input
    (``torch.chunk(input=y, ...)``) or was an ``hsplit`` / ``vsplit`` / ``dsplit``)."""
    torch.manual_seed(0)
    model, x = model().eval(), torch.randn(*x)
    slim = _pruned_in_half(model, x)
    masked, sliced = {}, {}
    assert get_model_complexity(model, x, per_module=masked, attention=True).flops == \
        get_model_complexity(slim, x, per_module=sliced, attention=True).flops
    assert masked == sliced == counts


def test_split_rows_slice_the_keep_of_the_dim_cut_and_move_the_others():
    """A chunk and a split by an int or sizes slice the cut dim's keep (a negative dim
    too, its input named too); ``hsplit`` / ``vsplit`` / ``dsplit`` cut dims 1, 0 and 2;
    an unbind drops it and moves the dims after it down; ``tensor_split`` at indices out
    of order (overlapping pieces) follows nothing."""
    x = torch.zeros(2, 6, 4)
    rows = {1: np.array([True, False, True, True, False, False]),
            2: np.array([True, True, False, True])}

    def pieces(func, *args, **kwargs):
        out = func(x, *args, **kwargs)
        return [{d: keep.tolist() for d, keep in r.items()}
                for r in split_rows(func, (x, ) + args, kwargs, rows, out)]

    heads = [True, True, False, True]
    assert pieces(torch.Tensor.chunk, 2, 1) == pieces(torch.split, 3, dim=-2) == \
        [{1: [True, False, True], 2: heads}, {1: [True, False, False], 2: heads}]
    assert pieces(torch.Tensor.split, [2, 1, 3], -2) == \
        [{1: [True, False], 2: heads}, {2: heads}, {1: [True, False, False], 2: heads}]
    assert pieces(torch.unbind, 1) == [{1: heads}] * 6
    assert pieces(torch.Tensor.unbind, 0) == [{0: rows[1].tolist(), 1: heads}] * 2
    assert pieces(torch.tensor_split, [4, 2], 1) == [{}, {}, {}]
    named = {'input': x, 'chunks': 2, 'dim': 1}
    assert [{d: keep.tolist() for d, keep in r.items()}
            for r in split_rows(torch.chunk, (), named, rows, torch.chunk(**named))] == \
        pieces(torch.hsplit, 2) == pieces(torch.Tensor.chunk, 2, 1)
    assert pieces(torch.Tensor.dsplit, [1]) == \
        [{1: rows[1].tolist()}, {1: rows[1].tolist(), 2: [True, False, True]}]
    assert pieces(torch.vsplit, 2) == [{1: rows[1].tolist(), 2: heads}] * 2


class JoinedHeads(HeadsOf6):
    """Linear as heads of 6, ``(B, N, 4, 6)`` -> joined by ``how`` -> a per-head norm ->
    Linear: its halves of heads swapped by a cat of the heads dim (``cat``, ``concat``,
    ``concatenate`` with NumPy's ``axis``, every argument named), or the heads riding
    along a join of the tokens with a copy (``cat``, ``hstack``, ``column_stack`` by name),
    of the batch (``vstack``), of a new dim (``stack``, by name at dim 1) or of the tokens
    of a ``(B, 4, N, 6)`` layout (``dstack``), the copy dropped after the norm."""

    def forward(self, x):
        b, n, _ = x.shape
        y = self.heads(x)
        first, second = y.chunk(2, 2)
        if self.how == 'cat':
            z = self.norm(torch.cat([second, first], 2))
        elif self.how == 'concat':
            z = self.norm(torch.concat((second, first), dim=2))
        elif self.how == 'concatenate':
            z = self.norm(torch.concatenate([second, first], axis=-2))
        elif self.how == 'cat_keywords':
            z = self.norm(torch.cat(tensors=[second, first], dim=2))
        elif self.how == 'cat_tokens':
            z = self.norm(torch.cat([y, 2 * y], 1))[:, :n]
        elif self.how == 'hstack':
            z = self.norm(torch.hstack([y, 2 * y]))[:, :n]
        elif self.how == 'column_stack':
            z = self.norm(torch.column_stack(tensors=[y, 2 * y]))[:, :n]
        elif self.how == 'vstack':
            z = self.norm(torch.vstack([y, 2 * y]))[:b]
        elif self.how == 'dstack':
            t = y.transpose(1, 2)
            z = self.norm(torch.dstack([t, 2 * t]))[:, :, :n].transpose(1, 2)
        elif self.how == 'stack':
            z = self.norm(torch.stack([y, 2 * y]))[0]
        else:  # stack_keywords
            z = self.norm(torch.stack(tensors=[y, 2 * y], dim=1))[:, 0]
        return self.b(z.flatten(2))


@pytest.mark.parametrize('how,norm', [
    *[(how, 2 * 3 * 2 * 6) for how in ('cat', 'concat', 'concatenate', 'cat_keywords')],
    *[(how, 2 * 2 * 3 * 2 * 6) for how in ('cat_tokens', 'hstack', 'column_stack', 'vstack',
                                           'dstack', 'stack', 'stack_keywords')],
])
def test_rows_joined_by_a_cat_or_stack_count_what_the_slim_model_has(how, norm):
    """A cat's output carries its pieces' kept rows end to end along the dim joined, and
    a join of another dim (a stack's new one too) the heads its pieces keep: the norm
    after it counts the slim model's half, where the join carried none and the norm
    counted every head (144 against 72 over the swapped heads, 288 against 144 over the
    doubled tokens)."""
    torch.manual_seed(0)
    model, x = JoinedHeads(how).eval(), torch.randn(2, 3, 8)
    slim = _pruned_in_half(model, x)
    masked, sliced = {}, {}
    assert get_model_complexity(model, x, per_module=masked).flops == \
        get_model_complexity(slim, x, per_module=sliced).flops
    assert masked == sliced == {'a': 576, 'norm': norm, 'b': 576}


def test_joined_rows_lay_the_pieces_keeps_end_to_end():
    """Along a cat's dim the keeps lie end to end at each piece's offset, a piece without
    one kept whole; another dim takes the keep of a piece that has one; a stack moves the
    dims from its new one up; ``column_stack``'s 1-D pieces join as columns, their keeps
    on the rows; pieces that ``vstack`` gives a dim first follow nothing."""
    a, b = torch.zeros(2, 4, 3), torch.zeros(2, 2, 3)
    heads, cut = np.array([True, False, True]), np.array([False, True, True, False])

    def joined(func, tensors, rows, *args, **kwargs):
        found = joined_rows(func, (tensors, ) + args, kwargs, rows, func(tensors, *args, **kwargs))
        return {d: keep.tolist() for d, keep in found.items()}

    assert joined(torch.cat, [b, a], [{2: heads}, {1: cut}], 1) == \
        joined(torch.concatenate, [b, a], [{}, {1: cut, 2: heads}], axis=-2) == \
        {1: [True, True, False, True, True, False], 2: heads.tolist()}
    assert joined_rows(torch.cat, (), {'tensors': [a, b], 'dim': 1}, [{1: cut}, {}],
                       torch.cat([a, b], 1))[1].tolist() == cut.tolist() + [True, True]
    assert joined(torch.hstack, [a, a], [{1: cut}, {}]) == \
        joined(torch.column_stack, [a, a], [{1: cut}, {}]) == {1: cut.tolist() + [True] * 4}
    column, matrix = torch.zeros(3), torch.zeros(3, 2)
    assert joined(torch.column_stack, [column, matrix, column], [{0: heads}, {1: cut[:2]}, {}]) \
        == {0: heads.tolist(), 1: [True, False, True, True]}
    assert joined(torch.stack, [a, a], [{1: cut}, {1: cut, 2: heads}], 1) == \
        {2: cut.tolist(), 3: heads.tolist()}
    assert joined(torch.cat, [a, a], [{}, {}], 0) == {}
    assert joined(torch.vstack, [a[0, 0], a[0, 0]], [{0: heads}, {}]) == {}
