"""quantize_torch_model and quantize_onnx_model: one call from a model to a calibrated graph."""
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import razorlib
from razorlib.ir import QuantizationStates, to_onnx
from razorlib.quantization import (QuantExecutor, export_graph, quantable_operations,
                                   quantize_onnx_model, quantize_torch_model)
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
