"""Latency budgets: the per-layer table and its on-disk cache, allocation to a latency
target with a deterministic stand-in runtime (no timing flakiness), an unreachable
target's error, and the real runtimes on a tiny layer."""
import copy
import json
import re

import numpy as np
import pytest
import torch
import torch.nn as nn

import razorlib
from razorlib.models import ResNet
from razorlib.pruning import ImportancePruner, allocate
from razorlib.pruning.latency import LatencyTable, LatencyTableError, LayerLatency, SubnetLatency
from razorlib.pruning.latency_search import monotone_fit
from razorlib.pruning.runtimes import (CudaRuntime, OnnxRuntime, Runtime, TorchRuntime,
                                       build_runtime, check_runtime)
from razorlib.utils import get_model_complexity

X = torch.randn(1, 3, 16, 16)


class FlopsRuntime(Runtime):
    """A deterministic 'runtime': 1 ms per MFLOP plus 0.01 ms per call; counts its calls."""
    name = 'flops'

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = 0

    def latency(self, modules, inputs):
        self.calls += 1
        return [get_model_complexity(m, inputs).flops * 1e-6 + 0.01 for m in modules]


def resnet():
    torch.manual_seed(0)
    return ResNet(depth=18, base_channels=8, num_classes=10, stem='cifar').eval()


def prepared(model=None, x=X, **kwargs):
    pruner = ImportancePruner(**kwargs)
    pruner.prepare_from_supernet(resnet() if model is None else model, x)
    return pruner


def test_the_table_is_cached_on_disk_and_read_back_without_measuring(tmp_path):
    runtime = FlopsRuntime(cache_dir=tmp_path)
    table = SubnetLatency(prepared(), X, runtime).table
    assert runtime.calls > 0 and len(list(tmp_path.iterdir())) == 1
    calls = runtime.calls
    again = SubnetLatency(prepared(), X, runtime).table
    assert runtime.calls == calls  # read from the cache, nothing timed
    assert again == table and LatencyTable.from_json(table.to_json()) == table
    conv = table.layers['stages.1.0.conv1.conv']  # 8 -> 16 channels, 3x3, 8x8 output
    assert conv.ins == [1, 2, 4, 6, 8] and conv.outs == [2, 4, 8, 12, 16]
    # the stand-in's ms are FLOPs: 16 * 8 * 9 * 64 MACs at full width, 1 at the first point
    assert conv.ms[-1][-1] == pytest.approx(16 * 8 * 9 * 64 * 1e-6 + 0.01)
    assert conv.at(8, 16) == conv.ms[-1][-1] and conv.at(5, 16) == pytest.approx(
        (conv.ms[2][-1] + conv.ms[3][-1]) / 2)


def test_the_cache_key_names_model_input_runtime_and_threads(tmp_path):
    def key(model=None, x=X, **runtime):
        pruner = prepared(model, x)
        return SubnetLatency(pruner, x, FlopsRuntime(cache_dir=tmp_path, **runtime)).table_key()

    base, meta = key()
    assert key()[0] == base
    assert meta['inputs'] == [[1, 3, 16, 16]] and meta['runtime'] == 'flops'
    assert meta['versions'] == {'torch': torch.__version__}
    assert key(x=torch.randn(1, 3, 32, 32))[0] != base
    assert key(threads=2)[0] != base
    wider = ResNet(depth=18, base_channels=16, num_classes=10, stem='cifar').eval()
    assert key(model=wider)[0] != base
    onnx = SubnetLatency(prepared(), X, OnnxRuntime(cache_dir=tmp_path)).table_key()[1]
    assert onnx['runtime'] == 'onnxruntime' and 'onnxruntime' in onnx['versions']


def test_a_table_of_another_version_is_refused_by_name(tmp_path):
    # (SubnetLatency.table then warns and re-measures: test_latency_cache.py); version 1
    # timed a shared layer on its first input alone, under a key blind to the forward
    path = tmp_path / 'table.json'
    path.write_text(json.dumps(dict(version=1, key='k', meta={}, layers={})))
    with pytest.raises(LatencyTableError, match=r'table\.json: latency table version 1, '
                       'expected 2'):
        LatencyTable.load(path)


class Resampled(nn.Module):
    """Two convs and a head; ``scale`` resamples between the convs (conv2's input size),
    which ``str()`` of the model does not show."""

    def __init__(self, scale=1):
        super().__init__()
        torch.manual_seed(0)
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.head, self.scale = nn.Linear(8, 10), scale

    def forward(self, x):
        x = torch.relu(self.c1(x))
        if self.scale != 1:
            x = nn.functional.interpolate(x, scale_factor=self.scale)
        return self.head(torch.relu(self.c2(x)).mean((2, 3)))


class SharedConv(nn.Module):
    """A conv shared by a 4x4 branch and a 32x32 one."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem, self.shared = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = self.stem(x)
        small = self.shared(nn.functional.avg_pool2d(x, 4))
        big = self.shared(nn.functional.interpolate(x, scale_factor=2))
        return self.head(small.mean((2, 3)) + big.mean((2, 3)))


def stand_in_ms(module, shape):
    """What :class:`FlopsRuntime` gives ``module`` on an input of ``shape``."""
    return get_model_complexity(module, (torch.zeros(shape), )).flops * 1e-6 + 0.01


def test_a_forward_that_feeds_a_layer_another_size_gets_a_table_of_its_own(tmp_path):
    plain, resampled = Resampled(), Resampled(scale=4)
    assert str(plain) == str(resampled)
    first = SubnetLatency(prepared(plain), X, FlopsRuntime(cache_dir=tmp_path))
    second = SubnetLatency(prepared(resampled), X, FlopsRuntime(cache_dir=tmp_path))
    assert first.table_key()[0] != second.table_key()[0]
    first.table
    c2 = second.table.layers['c2']  # measured, not read from the first model's file
    assert second.runtime.calls > 0 and len(list(tmp_path.iterdir())) == 2
    assert c2.ms[-1][-1] == pytest.approx(stand_in_ms(plain.c2, (1, 8, 64, 64)))


def test_the_key_tells_which_layer_is_in_channels_last():
    def key(layer):
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                              nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)).eval()
        model[layer].to(memory_format=torch.channels_last)
        return SubnetLatency(prepared(model), X, FlopsRuntime(cache_dir=False)).table_key()

    (first, meta), (second, other) = key(0), key(2)
    assert meta['param_formats'] == other['param_formats'] == ['channels_last', 'contiguous']
    assert first != second


def test_a_layer_called_on_two_sizes_is_timed_on_each():
    table = SubnetLatency(prepared(SharedConv()), X, FlopsRuntime(cache_dir=False)).table
    shared = table.layers['shared']
    conv = nn.Conv2d(8, 8, 3, padding=1)
    both = stand_in_ms(conv, (1, 8, 4, 4)) + stand_in_ms(conv, (1, 8, 32, 32))
    assert shared.calls == 2 and shared.calls * shared.ms[-1][-1] == pytest.approx(both)
    # at a kept width too: a quarter of the input and output channels on both sizes
    quarter = nn.Conv2d(2, 2, 3, padding=1)
    assert shared.calls * shared.at(2, 2) == pytest.approx(
        stand_in_ms(quarter, (1, 2, 4, 4)) + stand_in_ms(quarter, (1, 2, 32, 32)))


def test_runtime_classes_never_share_a_table():
    class Slow(FlopsRuntime):  # another class, the same name
        pass

    def fields(runtime):
        return SubnetLatency(prepared(), X, runtime).table_key()

    (key, meta), (slow_key, slow_meta) = fields(FlopsRuntime()), fields(Slow())
    assert meta['runtime'] == slow_meta['runtime'] == 'flops' and key != slow_key
    assert meta['runtime_class'] == f'{__name__}.FlopsRuntime'
    assert slow_meta['runtime_class'] == (f'{__name__}.test_runtime_classes_never_share_a_'
                                          'table.<locals>.Slow')
    assert TorchRuntime().key_fields()['runtime_class'] == (
        'razorlib.pruning.runtimes.TorchRuntime')


def test_a_ready_timer_of_another_pruner_or_inputs_is_refused():
    pruner, runtime = prepared(), FlopsRuntime(cache_dir=False)
    timer = SubnetLatency(pruner, X, runtime)
    with pytest.raises(ValueError, match=r'runtime=SubnetLatency: it slices the subnets of the '
                       r'pruner it was built with \(ImportancePruner of a ResNet\), not of the '
                       r'ImportancePruner being allocated\. Build it as SubnetLatency\('):
        allocate(prepared(), latency=0.5, example_inputs=X, runtime=timer)
    batch = torch.randn(4, 3, 16, 16)
    with pytest.raises(ValueError, match=re.escape(
            "runtime=SubnetLatency: it measures on inputs [[[1, 3, 16, 16], 'torch.float32', "
            "'contiguous']], not the example_inputs [[[4, 3, 16, 16], 'torch.float32', "
            "'contiguous']] of the allocation. Build it as")):
        allocate(pruner, latency=0.5, example_inputs=batch, runtime=timer)
    assert runtime.calls == 0  # refused before anything was timed
    with pytest.raises(ValueError, match=r'razorlib\.prune: the runtime is a SubnetLatency, '
                       r'which times the subnets of the pruner it was built with.*pass the '
                       r'Runtime it measures on \(runtime=timer\.runtime'):
        razorlib.prune(resnet(), X, latency=0.5, runtime=timer)
    assert runtime.calls == 0
    # its own pruner and inputs (another tensor of their shape) are served
    allocation = allocate(pruner, latency=0.5, example_inputs=X.clone(), runtime=timer)
    assert 0.45 <= allocation.fraction('latency') <= 0.5 * 1.02
    # no example_inputs: the timer's own are the allocation's
    assert allocate(pruner, latency=0.5, runtime=timer).kept == allocation.kept


def test_a_depthwise_conv_is_timed_along_its_diagonal(tmp_path):
    net = nn.Sequential(nn.Conv2d(3, 8, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, groups=8),
                        nn.ReLU(), nn.Conv2d(8, 4, 1)).eval()
    table = SubnetLatency(prepared(net), X, FlopsRuntime(cache_dir=False)).table
    depthwise = table.layers['2']
    assert depthwise.bound and depthwise.ins == depthwise.outs == [1, 2, 4, 6, 8]
    assert not table.layers['4'].bound and table.layers['4'].outs == [4]


@pytest.mark.parametrize('global_ranking', [False, True])
def test_allocation_meets_a_latency_target_as_the_slim_model_measures(global_ranking):
    runtime = FlopsRuntime(cache_dir=False)
    pruner = prepared(latency=0.5, runtime=runtime, global_ranking=global_ranking)
    allocation = pruner.allocate()
    achieved = allocation.fraction('latency')
    assert 0.45 <= achieved <= 0.5 * 1.02
    # the slim model razorlib.prune returns runs at that fraction on the runtime
    slim = razorlib.prune(resnet(), X, latency=0.5, runtime=runtime,
                          global_ranking=global_ranking)
    dense_ms, slim_ms = runtime.latency([resnet(), slim], X)
    assert slim_ms / dense_ms == pytest.approx(achieved, rel=1e-6)
    assert 'latency' in str(allocation) and 'measured' in str(allocation)


def test_a_tight_tolerance_keeps_the_measured_latency_under_the_target():
    pruner = prepared()
    runtime = FlopsRuntime(cache_dir=False)
    timer = SubnetLatency(pruner, X, runtime, tolerance=0.0, max_measurements=20)
    allocation = allocate(pruner, pruner.score(), latency=0.3, global_ranking=True,
                          example_inputs=X, runtime=timer)
    assert 0.27 <= allocation.fraction('latency') <= 0.3
    # few whole-model measurements: the table predicts, the measurements confirm
    assert sum(len(s) for s in allocation.latency.measured.values()) <= 12


def test_an_unreachable_latency_target_names_the_smallest_reachable_value():
    pruner = prepared(latency=0.01, runtime=FlopsRuntime(cache_dir=False), max_ratio=0.5)
    before = copy.deepcopy(pruner.current_subnet)
    with pytest.raises(ValueError) as err:
        pruner.allocate()
    message = str(err.value)
    assert 'latency=0.01 cannot be met on flops' in message
    best = float(message.split('ask for latency>=')[1].split(',')[0])
    assert 0.2 < best < 0.4  # max_ratio=0.5 keeps half of each group: about a quarter
    assert all(np.array_equal(before[g], pruner.current_subnet[g]) for g in before)


def test_monotone_fit_pools_measurements_out_of_order():
    assert monotone_fit({0: [0.2], 3: [0.6], 4: [0.4, 0.5, 0.5], 9: [1.0]}) == {
        0: 0.2, 3: 0.525, 4: 0.525, 9: 1.0}  # (0.6 + 3 * 0.5) / 4: weighted by samples


def test_layer_latency_interpolates_and_clamps():
    layer = LayerLatency(2, [4, 8], [4, 8], [[1.0, 2.0], [2.0, 4.0]])
    assert layer.at(6, 6) == pytest.approx(2.25)
    assert layer.at(1, 1) == 1.0 and layer.at(16, 16) == 4.0


def test_runtimes_time_a_layer_on_torch_and_onnxruntime():
    conv = nn.Conv2d(3, 8, 3)
    for runtime in (TorchRuntime(warmup=1, repeat=3), OnnxRuntime(warmup=1, repeat=3)):
        (ms, ) = runtime.latency([conv], (X, ))
        assert 0 < ms < 1000
    with pytest.raises(ValueError, match="unknown latency runtime 'tensorrt'"):
        build_runtime('tensorrt')


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the message without CUDA')
def test_the_cuda_runtime_says_when_there_is_no_gpu():
    with pytest.raises(RuntimeError, match="runtime 'cuda': torch.cuda.is_available"):
        CudaRuntime()


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')
def test_the_cuda_runtime_times_a_layer_on_the_gpu():
    runtime = CudaRuntime(warmup=1, repeat=3)
    (ms, ) = runtime.latency([nn.Conv2d(3, 8, 3)], (X, ))
    assert ms > 0 and runtime.key_fields()['device'] == 'cuda'


def test_the_cuda_runtime_options_are_checked_by_name_without_a_gpu():
    assert check_runtime(dict(type='cuda', graph=True, dtype='float16')) == (
        CudaRuntime, dict(graph=True, dtype='float16'))
    with pytest.raises(TypeError, match=r"'grahp' is not a key of the cuda runtime \(did you "
                       r"mean 'graph'\?\)"):
        build_runtime(dict(type='cuda', grahp=True))
    with pytest.raises(ValueError, match="dtype='int8': a floating dtype"):
        check_runtime(dict(type='cuda', dtype='int8'))


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')
def test_the_cuda_runtime_replays_a_graph_of_the_deployed_form_of_a_copy():
    runtime = CudaRuntime(warmup=1, repeat=3, graph=True, dtype='float16', channels_last=True)
    assert repr(runtime).endswith("graph=True, dtype='float16', channels_last=True)")
    fields = runtime.key_fields()
    assert fields['graph'] and fields['dtype'] == 'float16' and fields['channels_last']
    assert 'graph' not in CudaRuntime().key_fields()  # eager float32 keys as before
    conv = nn.Conv2d(3, 8, 3)
    (ms, ) = runtime.latency([conv], (X, ))
    assert ms > 0
    assert conv.weight.dtype == torch.float32 and conv.weight.device.type == 'cpu'
    # what is timed: a replayed graph (the same output tensor, overwritten in place) of
    # the float16 channels_last copy
    run = runtime.compile(conv, (X, ))
    first, second = run(), run()
    assert first is second and first.dtype == torch.float16 and first.is_cuda
    assert first.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(first.float().cpu(), conv(X), atol=1e-2, rtol=1e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')
def test_a_latency_budget_on_cuda_graphs_holds_when_the_slim_model_is_timed_again(tmp_path):
    torch.manual_seed(0)
    model = ResNet(depth=18, num_classes=10).eval()
    x = torch.randn(32, 3, 112, 112)
    runtime = CudaRuntime(graph=True, dtype='float16', channels_last=True, repeat=30,
                          cache_dir=tmp_path)
    # (a GPU this size is far from busy: even a tenth of the FLOPs may run at half the
    # latency, so the budget asked for is one any GPU reaches)
    slim = razorlib.prune(model, x, latency=0.9, runtime=runtime, round_to=8)
    dense_ms, slim_ms = runtime.latency([model, slim], (x, ))
    assert slim_ms / dense_ms <= 0.9 * 1.05
    assert len(list(tmp_path.glob('ResNet-*.json'))) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')
def test_a_forward_a_cuda_graph_cannot_capture_is_named():
    class Synchronising(nn.Module):
        def forward(self, x):
            return x[x > 0].sum()  # a data-dependent shape: the host waits for the GPU

    with pytest.raises(RuntimeError, match="runtime 'cuda' with graph=True: the forward "
                       r'cannot be captured in a CUDA graph \(.*\); time it eagerly'):
        CudaRuntime(graph=True, warmup=1, repeat=1).latency([Synchronising()], (X, ))


class KeywordCalls(nn.Module):
    """Layers called with their input by keyword."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(input=torch.relu(self.fc1(input=self.conv(input=x).mean((2, 3)))))


def test_layers_called_by_keyword_are_timed_on_their_input():
    table = SubnetLatency(prepared(KeywordCalls().eval()), X, FlopsRuntime(cache_dir=None)).table
    fc1 = table.layers['fc1']  # 16 -> 32 on one row
    assert fc1.calls == 1 and fc1.ms[-1][-1] == pytest.approx(16 * 32 * 1e-6 + 0.01)
