"""quantize_torch_model and quantize_onnx_model: one call from a model to a calibrated graph."""
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import razorlib
from razorlib.ir import QuantizationStates, from_torch, to_onnx
from razorlib.quantization import (DEFAULT_PASSES, QuantExecutor, export_graph,
                                   quantable_operations, quantize_onnx_model,
                                   quantize_torch_model)
from ptq_helpers import STEPS, SmallNet, batches, float_graph, run_onnxruntime, worst_steps


def net():
    torch.manual_seed(0)
    return SmallNet().eval()


def configs(graph):
    return [config for op in quantable_operations(graph) for config, _ in op.config_with_variable]


def test_a_calibrated_graph_from_a_dataloader():
    data = DataLoader(TensorDataset(torch.cat(batches(4))), batch_size=2)
    graph = quantize_torch_model(net(), data, batches(1)[0], calib_steps=3,
                                 collate_fn=lambda batch: batch[0], progress=False)
    assert all(config.state is not QuantizationStates.INITIAL for config in configs(graph))
    assert {op.platform.name for op in quantable_operations(graph)} == {'TRT_INT8'}
    assert QuantExecutor(graph)(batches(1)[0])[0].shape == (2, 5)


@pytest.mark.parametrize('observer, expected', [('percentile', 'percentile'), ('kl', 'kl'),
                                                (None, 'minmax')])
def test_observer_of_the_activations(observer, expected):
    graph = quantize_torch_model(net(), batches(2), batches(1)[0], platform='ORT_INT8',
                                 observer=observer, progress=False)
    first = quantable_operations(graph)[0]
    assert first.input_quant_config[0].observer_algorithm == expected
    assert first.input_quant_config[1].observer_algorithm == 'minmax'  # the weight


def test_the_onnx_route_gives_the_same_graph(tmp_path):
    path = tmp_path / 'net.onnx'
    to_onnx(float_graph(), path)
    from_onnx = quantize_onnx_model(path, batches(2), platform='ORT_INT8', progress=False)
    from_torch = quantize_torch_model(net(), batches(2), batches(1)[0], platform='ORT_INT8',
                                      progress=False)
    pairs = list(zip(configs(from_onnx), configs(from_torch)))
    assert pairs and all(first.state is second.state for first, second in pairs)
    assert all(torch.equal(first.scale, second.scale) for first, second in pairs
               if first.scale is not None)


def test_a_slimmed_subnet_goes_through_unchanged(tmp_path):
    example = batches(1)[0]
    slim = razorlib.prune(net(), example, ratio=0.5).eval()
    state = {key: value.clone() for key, value in slim.state_dict().items()}
    graph = quantize_torch_model(slim, batches(3), example, progress=False)
    assert all(torch.equal(state[key], value) for key, value in slim.state_dict().items())
    stem = next(op for op in quantable_operations(graph) if op.type == 'Conv')
    assert stem.inputs[1].shape == tuple(slim.stem.weight.shape) == (4, 3, 3, 3)
    model = export_graph(graph, tmp_path / 'slim.onnx')
    x = batches(1, seed=9)[0]
    assert worst_steps(graph, QuantExecutor(graph)(x), run_onnxruntime(model, [x])) <= STEPS


def test_observers_and_dispatchers_are_config_dicts_or_names():
    by_dict = quantize_torch_model(net(), batches(3), batches(1)[0], progress=False,
                                   observer=dict(type='PercentileObserver', percentile=90.0),
                                   dispatcher=dict(type='AggressiveDispatcher'))
    by_name = quantize_torch_model(net(), batches(3), batches(1)[0], progress=False,
                                   observer='percentile', dispatcher='aggressive',
                                   observer_options={'percentile': {'percentile': 90.0}})
    default = quantize_torch_model(net(), batches(3), batches(1)[0], progress=False)
    pairs = list(zip(configs(by_dict), configs(by_name)))
    assert pairs and all(first.state is second.state for first, second in pairs)
    assert all(torch.equal(first.scale, second.scale) for first, second in pairs
               if first.scale is not None)
    assert configs(by_dict)[0].observer_algorithm == 'PercentileObserver'
    assert not torch.equal(configs(by_dict)[0].scale, configs(default)[0].scale)  # 90 < 99.99


def test_an_empty_calibration_set_is_refused():
    with pytest.raises(ValueError, match="dataloader of graph '.*' gave no batch"):
        quantize_torch_model(net(), [], batches(1)[0], progress=False)
    with pytest.raises(ValueError, match="dataloader of graph '.*' gave no batch"):
        quantize_onnx_model(to_onnx(float_graph()), [], progress=False)


def test_a_calibration_batch_of_another_shape_is_named():
    data = batches(2) + batches(1, shape=(2, 3, 10, 10))
    with pytest.raises(ValueError, match=r"calibration batch 2: graph '.*': input 'x' expects "
                       r'shape \(batch, 3, 8, 8\), got \(2, 3, 10, 10\); axis 2 is fixed'):
        quantize_torch_model(net(), data, data[0], progress=False)
    data = batches(2) + batches(1, shape=(4, 3, 8, 8))
    with pytest.raises(ValueError, match=r'calibration batch 2: .* expects shape '
                       r'\(2, 3, 8, 8\), got \(4, 3, 8, 8\); axis 0 is fixed to 2'):
        quantize_torch_model(net(), data, data[0], dynamic_batch=False, progress=False)
    graph = quantize_torch_model(net(), data, data[0], progress=False)  # the batch axis is free
    assert QuantExecutor(graph)(data[2])[0].shape == (4, 5)


class MatMulAdd(nn.Module):
    """``x @ W + b``, written out: a MatMul and an Add the passes fuse into a Gemm."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(6, 4))
        self.bias = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return torch.relu(x @ self.weight + self.bias)


def test_the_graph_passes_run_before_quantizing():
    example = torch.randn(3, 6)
    proto = to_onnx(from_torch(MatMulAdd(), example, exporter='torchscript'))
    fused = quantize_onnx_model(proto, [example], progress=False)
    assert [op.type for op in fused.topological_sort()] == ['Gemm', 'Relu']
    gemm = fused.topological_sort()[0]
    assert gemm.input_quant_config[1].channel_axis == 1  # per channel, as a layer's weight
    kept = quantize_onnx_model(proto, [example], progress=False, passes=())
    assert [op.type for op in kept.topological_sort()] == ['MatMul', 'Add', 'Relu']
    assert 'FuseGemm' in DEFAULT_PASSES
