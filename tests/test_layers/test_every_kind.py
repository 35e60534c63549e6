"""Every built-in layer kind, pruned in a small model: the masked supernet computes and
counts exactly what its sliced model does."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from razorlib.layers import kind_of
from razorlib.pruning import L1NormPruner
from razorlib.utils import get_model_complexity


class Convs1d3dTransposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(3, 8, 3, padding=1)
        self.g1 = nn.Conv1d(8, 8, 3, padding=1, groups=2)
        self.c3 = nn.Conv3d(3, 6, 3, padding=1)
        self.t3 = nn.ConvTranspose3d(6, 4, 2, stride=2)
        self.t2 = nn.ConvTranspose2d(4, 8, 3, groups=4)
        self.dw = nn.Conv2d(8, 16, 3, groups=8, padding=1)
        self.pw = nn.Conv2d(16, 5, 1)

    def forward(self, x1, x3):
        a = self.g1(F.relu(self.c1(x1))).mean(-1)
        b = self.t3(F.relu(self.c3(x3))).mean(2)
        b = self.pw(F.relu(self.dw(self.t2(b))))
        return a, b.mean((2, 3))


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.gn = nn.GroupNorm(2, 8)
        self.conv3 = nn.Conv2d(8, 6, 1)
        self.inorm = nn.InstanceNorm2d(6)
        self.conv4 = nn.Conv2d(6, 4, 1)
        self.sync = nn.SyncBatchNorm(4)
        self.fc = nn.Linear(4, 12)
        self.ln = nn.LayerNorm(12)
        self.rms = nn.RMSNorm(12, eps=1e-6)
        self.bn1 = nn.BatchNorm1d(12)
        self.head = nn.Linear(12, 3)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = F.relu(self.gn(self.conv2(x)))
        x = F.relu(self.inorm(self.conv3(x)))
        x = self.sync(self.conv4(x)).mean((2, 3))
        x = F.gelu(self.ln(self.fc(x)))
        return self.head(self.bn1(x + self.rms(x)))


class Tokens(nn.Module):
    """Embedding, position embedding and class token, layer scale, attention."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 16)
        self.cls_token = nn.Parameter(torch.randn(1, 1, 16))
        self.pos_embed = nn.Parameter(torch.randn(1, 7, 16))
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.norm = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)
        self.gamma = nn.Parameter(torch.rand(16) + 0.5)
        self.head = nn.Linear(16, 4)

    def forward(self, ids):
        x = self.embed(ids)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        x = self.attn(x, x, x, need_weights=False)[0]
        x = x + self.gamma * self.fc2(F.gelu(self.fc1(self.norm(x))))
        return self.head(x[:, 0])


CASES = {
    'convs': (Convs1d3dTransposed, lambda: (torch.randn(2, 3, 10), torch.randn(2, 3, 4, 6, 6))),
    'norms': (Norms, lambda: torch.randn(2, 3, 6, 6)),
    'tokens': (Tokens, lambda: torch.randint(0, 20, (2, 6))),
}


def _outputs(model, inputs):
    with torch.no_grad():
        out = model(*inputs) if isinstance(inputs, tuple) else model(inputs)
    return out if isinstance(out, tuple) else (out, )


@pytest.fixture(params=sorted(CASES))
def pruned(request):
    build, make_inputs = CASES[request.param]
    torch.manual_seed(0)
    model = build().eval()
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.normal_()
            module.running_var.uniform_(0.5, 1.5)
    inputs = make_inputs()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, inputs)
    pruner.set_subnet(pruner.sample_subnet())
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    return request.param, model, slim, inputs, pruner


def test_masked_equals_slim(pruned):
    _, model, slim, inputs, _ = pruned
    for masked, sliced in zip(_outputs(model, inputs), _outputs(slim, inputs)):
        torch.testing.assert_close(masked, sliced, rtol=1e-4, atol=1e-5)


def test_masked_counts_exactly_what_the_slim_model_has(pruned):
    _, model, slim, inputs, _ = pruned
    masked = get_model_complexity(model, inputs)
    sliced = get_model_complexity(slim, inputs)
    assert sliced.params == sum(p.numel() for p in slim.parameters())
    assert (masked.params, masked.flops) == (sliced.params, sliced.flops)
    assert sliced.params < sum(p.numel() for p in model.parameters())


def test_every_kind_is_exercised(pruned):
    name, model, slim, _, pruner = pruned
    kinds = {type(kind_of(m)).__name__ for m in model.modules() if kind_of(m) is not None}
    expected = {
        'convs': {'ConvKind'},
        'norms': {'ConvKind', 'BatchNormKind', 'GroupNormKind', 'InstanceNormKind',
                  'LayerNormKind', 'RMSNormKind', 'LinearKind'},
        'tokens': {'EmbeddingKind', 'MultiheadAttentionKind', 'LayerNormKind', 'LinearKind'},
    }[name]
    assert kinds == expected
    pruned_layers = {n for n, m in slim.named_modules()
                     if kind_of(m) is not None and m is not slim and
                     any(p.numel() < q.numel() for p, q in
                         zip(m.parameters(recurse=False),
                             dict(model.named_modules())[n].parameters(recurse=False)))}
    assert pruned_layers, 'nothing was pruned'


class PatchTokens(nn.Module):
    """Patch embedding, class token, position embedding and layer scale, no attention:
    the residual stream is prunable, and with it every bare parameter on it."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 2, stride=2)
        self.cls_token = nn.Parameter(torch.randn(1, 1, 16))
        self.pos_embed = nn.Parameter(torch.randn(1, 5, 16))
        self.norm = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)
        self.gamma = nn.Parameter(torch.rand(16) + 0.5)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        x = x + self.gamma * self.fc2(F.gelu(self.fc1(self.norm(x))))
        return self.head(x[:, 0])


def test_bare_parameters_are_sliced_and_counted():
    torch.manual_seed(0)
    model = PatchTokens().eval()
    x = torch.randn(2, 3, 4, 4)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    pruner.set_subnet(pruner.sample_subnet())
    cfg = pruner.export_subnet()
    assert {name: {dim: sel.count for dim, sel in dims.items()}
            for name, dims in cfg.params.items()} == {
        'cls_token': {2: 8}, 'pos_embed': {2: 8}, 'gamma': {0: 8}}
    masked = get_model_complexity(model, x)
    slim = pruner.deploy_subnet(copy.deepcopy(model), cfg)
    assert slim.pos_embed.shape == (1, 5, 8) and slim.gamma.shape == (8, )
    assert masked.params == sum(p.numel() for p in slim.parameters())
    torch.testing.assert_close(_outputs(model, x)[0], _outputs(slim, x)[0])


def test_attention_products_are_counted_only_on_request():
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q = torch.randn(1, 5, 8)
    plain = get_model_complexity(mha, (q, q, q))
    per_module = {}
    full = get_model_complexity(mha, (q, q, q), per_module=per_module, attention=True)
    # QK^T and AV: 2 heads x 5 x 5 x 4, twice
    assert per_module['<attention>'] == 2 * 5 * 5 * 4 * 2
    assert full.flops - plain.flops == per_module['<attention>']
    assert plain.flops == 5 * 8 * 8 * 4  # q, k, v and output projections


@pytest.mark.parametrize('affine', [False, True])
def test_instance_norm_traced_with_one_sample_is_pruned_with_its_producer(affine):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.InstanceNorm2d(8, affine=affine),
                          nn.ReLU(), nn.Conv2d(8, 4, 1)).eval()
    x = torch.randn(1, 3, 8, 8)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    assert pruner.groups.prunable['0'].norms == ['1']
    pruner.set_subnet(pruner.sample_subnet())
    masked = _outputs(model, x)[0]
    count = get_model_complexity(model, x)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert slim[1].num_features == 4
    torch.testing.assert_close(_outputs(slim, x)[0], masked)
    assert count.params == sum(p.numel() for p in slim.parameters())
