"""The tracer: inputs, state restoration, shared modules, outputs, dead ends, scaling."""
import time

import pytest
import torch
import torch.nn as nn

from helpers import Traced
from razorlib.pruning import L1NormPruner
from razorlib.tracing import build_groups, trace


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(8, 4)

    def forward(self, x, scale=1.0):
        return self.fc(self.drop(self.bn(self.conv(x))).mean((2, 3))) * scale


def test_default_example_input_is_an_imagenet_sized_image():
    calls = []
    model = Small()
    model.register_forward_pre_hook(lambda m, args: calls.append(args[0].shape))
    trace(model)
    assert calls == [torch.Size([1, 3, 224, 224])]


@pytest.mark.parametrize('inputs', [torch.randn(1, 3, 8, 8), (torch.randn(1, 3, 8, 8), 2.0),
                                    {'x': torch.randn(1, 3, 8, 8), 'scale': 2.0}])
def test_tensor_tuple_and_dict_inputs(inputs):
    assert Traced(Small(), inputs).group_of('conv').prunable


def test_tracing_restores_the_model_exactly():
    model = Small()
    model.conv.weight.requires_grad_(False)
    model.train()
    model.bn.eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    attrs = {name: set(vars(m)) for name, m in model.named_modules()}
    trace(model, torch.randn(2, 3, 8, 8))
    assert not model.conv.weight.requires_grad and model.conv.bias.requires_grad
    assert model.training and model.fc.training and not model.bn.training
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert {name: set(vars(m)) for name, m in model.named_modules()} == attrs
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert not any(b.requires_grad for b in model.buffers())


def test_frozen_parameters_are_still_traced():
    model = Small()
    for p in model.parameters():
        p.requires_grad_(False)
    assert Traced(model, torch.randn(1, 3, 8, 8)).group_of('conv').prunable


class SharedHead(nn.Module):
    """One head module applied to two feature levels; returns a dict of lists."""

    def __init__(self):
        super().__init__()
        self.p1, self.p2 = nn.Conv2d(3, 8, 1), nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 1))

    def forward(self, x):
        return {'out': [self.head(self.p1(x)), self.head(self.p2(x))]}


def test_shared_module_records_every_call_and_binds_its_inputs():
    traced = Traced(SharedHead(), torch.randn(1, 3, 8, 8))
    assert traced.graph.module_calls['head.0'] == 2
    assert (traced.classes('p1') == traced.classes('p2')).all()
    assert traced.group_of('p1').consumers == ['head.0']
    assert traced.group_of('head.0').prunable
    assert traced.group_of('head.2').frozen  # its outputs are model outputs


class DeadEnds(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 1)
        self.aux = nn.Sequential(nn.Conv2d(8, 4, 1), nn.ReLU(), nn.Conv2d(4, 5, 1))
        self.unused = nn.Conv2d(8, 6, 1)
        self.never = nn.Linear(3, 3)
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        y = self.stem(x)
        self.aux(y)
        self.unused(y)
        return self.fc(y.mean((2, 3)))


def test_dead_branches_follow_their_producers_and_keep_their_outputs():
    traced = Traced(DeadEnds(), torch.randn(1, 3, 8, 8))
    stem = traced.group_of('stem')
    assert stem.prunable and set(stem.consumers) == {'aux.0', 'unused', 'fc'}
    assert traced.group_of('aux.0').prunable
    assert [r.kind for r in traced.reasons('aux.2')] == ['dead-end', 'dead-end']
    assert traced.graph.untraced == ['never']


def test_except_start_keys_freeze_output_channels_only():
    traced = Traced(DeadEnds(), torch.randn(1, 3, 8, 8), except_start_keys=['aux'])
    assert traced.group_of('aux.0').frozen
    assert traced.reasons('aux.0')[0].kind == 'except-key'
    assert traced.group_of('stem').prunable  # aux.0's inputs still follow the stem


def test_outputs_are_never_pruned_even_without_a_layer_in_between():
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 8, 1)

        def forward(self, x):
            y = self.a(x)
            return y + self.b(y)
    traced = Traced(Residual(), torch.randn(1, 3, 4, 4))
    assert [r.kind for r in traced.reasons('a')] == ['output']


def test_a_prepared_model_cannot_be_traced_again():
    model = Small()
    pruner = L1NormPruner()
    pruner.prepare_from_supernet(model, torch.randn(1, 3, 8, 8))
    with pytest.raises(ValueError, match="module 'conv' already has a 'in_mask' buffer"):
        trace(model, torch.randn(1, 3, 8, 8))


@pytest.mark.parametrize('meta', [True, False])
def test_tracing_under_no_grad_gives_the_groups_of_a_plain_trace(meta):
    model, x = Small(), torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        quiet = trace(model, x, meta=meta)
    plain = trace(model, x, meta=meta)
    assert sorted((u.name, u.role) for u in quiet.uses) == \
        sorted((u.name, u.role) for u in plain.uses)
    assert {gid: g.num_channels for gid, g in build_groups(quiet).prunable.items()} == \
        {gid: g.num_channels for gid, g in build_groups(plain).prunable.items()} == {'conv': 8}


def test_tracing_under_inference_mode_is_refused_with_the_way_out():
    with torch.inference_mode(), pytest.raises(RuntimeError, match=r'outside inference_mode'
                                               r'; torch.no_grad\(\) is fine'):
        trace(Small(), torch.randn(1, 3, 8, 8))


def test_model_without_traced_outputs_is_an_error():
    with pytest.raises(ValueError, match='outputs no tensor that depends on its parameters'):
        trace(nn.Identity(), torch.randn(1, 3))


class DenseChain(nn.Module):
    """Every layer reads the concat of all previous outputs: exponentially many paths."""

    def __init__(self, layers, growth=2):
        super().__init__()
        self.stem = nn.Conv2d(3, growth, 1)
        self.layers = nn.ModuleList(nn.Conv2d(growth * (i + 1), growth, 1) for i in range(layers))

    def forward(self, x):
        feats = [self.stem(x)]
        for layer in self.layers:
            feats.append(torch.relu(layer(torch.cat(feats, 1))))
        return torch.cat(feats, 1).mean()


def test_walk_is_linear_on_densenet_like_graphs():
    timings = {}
    for depth in (20, 80):
        model = DenseChain(depth)
        start = time.perf_counter()
        graph = trace(model, torch.randn(1, 3, 2, 2))
        timings[depth] = time.perf_counter() - start
        assert graph.op_counts['CatBackward0'] == depth + 1
    # 4x the layers, ~4-8x the nodes+edges (concat widths grow); never 2**60 paths
    assert timings[80] < 40 * timings[20] + 1.0


class NeedsValues(Small):
    """Reads a value (data-dependent control flow) and caches a tensor on itself."""

    def forward(self, x, scale=1.0):
        self.cache = x.mean()
        if float(self.cache) > 100:
            x = x * 0
        return super().forward(x, scale)


def test_models_that_read_values_fall_back_to_a_real_forward_and_leave_no_attributes():
    model = NeedsValues()
    traced = Traced(model, torch.randn(1, 3, 8, 8))
    assert traced.graph.device == 'real'
    assert traced.group_of('conv').prunable
    assert not hasattr(model, 'cache')
    assert Traced(Small(), torch.randn(1, 3, 8, 8)).graph.device == 'meta'


def test_a_meta_model_that_reads_values_names_the_model_and_the_reason():
    with torch.device('meta'):
        model = NeedsValues()
    with pytest.raises(RuntimeError, match=r'NeedsValues: its forward fails on the meta device '
                       r'\(RuntimeError: .*meta.*\), and its weights are on meta'):
        trace(model, torch.randn(1, 3, 8, 8))


@pytest.mark.parametrize('name', ['resnet_bottleneck', 'shufflenet_v2', 'vit', 'fpn_shared_head',
                                  'dead_branch', 'convnext'])
def test_meta_and_real_forwards_give_the_same_groups(name):
    from zoo import ZOO
    entry = ZOO[name]
    model = entry.build()
    summaries = []
    for meta in (True, False):
        groups = Traced(model, entry.example_inputs(), meta=meta).groups.groups
        summaries.append({gid: (g.num_channels, g.layers, g.consumers, g.norms, g.params,
                                [str(r) for r in g.frozen_reasons]) for gid, g in groups.items()})
    assert summaries[0] == summaries[1]


class Caching(nn.Module):
    """Fills an empty cache, appends to a list and rewrites a filled table in forward."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.cache, self.history, self.table = {}, [], {'scale': 1.0}

    def forward(self, x):
        y = self.conv(x)
        self.cache['last'] = y
        self.history.append(y.shape)
        self.table['scale'] = 2.0
        self.conv = self.conv  # a reassignment leaves the attribute as it was
        return y


def test_containers_the_forward_fills_are_put_back():
    model = Caching()
    cache, history, table = model.cache, model.history, model.table
    trace(model, torch.randn(1, 3, 4, 4))
    assert model.cache is cache and cache == {}
    assert model.history is history and history == []
    assert model.table is table and table == {'scale': 1.0}
    assert model.conv.weight.device.type == 'cpu'


class Tokens(nn.Module):
    """Linear layers on tokens, and a bare weight used through ``F.linear``."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 4)
        self.w = nn.Parameter(torch.randn(3, 4))

    def forward(self, x):
        return nn.functional.linear(self.fc2(self.fc1(x).relu()), self.w)


def test_transposed_weights_get_slots_only_when_a_rule_reads_them():
    graph = trace(Tokens(), torch.randn(2, 5, 6))
    params = {s.name for s in graph.slots.sources if s.kind == 'param'}
    assert params == {'w:0', 'w:1'}  # fc1/fc2's kinds read their widths, not their weights
    assert {u.name for u in graph.uses if u.role == 'param'} == {'w'}
