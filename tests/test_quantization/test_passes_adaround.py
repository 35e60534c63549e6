"""AdaRound: learned roundings reconstruct a layer better than rounding to nearest."""
import torch

from razorlib.ir import from_torch
from razorlib.quantization import (AdaRound, QuantExecutor, bake_parameters, calibrate,
                                   dequantize_graph, export_graph, quantize_graph,
                                   int8_session, restore_quantize_state,
                                   set_activation_observer)
from razorlib.quantization.passes import kernel_output, record_layer, weight_layers


def layer_error(graph, batches) -> float:
    """The squared error of the conv's output (its inputs quantized) against FP32."""
    executor = QuantExecutor(graph)
    op, = weight_layers(graph)
    total = 0.0
    for record in record_layer(executor, op, batches):
        with torch.no_grad():
            total += float((kernel_output(executor, op, record.quant_inputs)
                            - record.fp32_output).square().sum())
    return total


def images(count: int) -> torch.Tensor:
    """Positive inputs (as after a ReLU: correlated through their mean, which is where
    choosing roundings together beats rounding each weight to nearest) on the activation
    grid (minmax scale 1/127), so the layer's error is its weights' rounding alone."""
    x = torch.randint(0, 128, (count, 8, 8, 8)) / 127.0
    x[0, 0, 0, 0] = 1.0
    return x


def quantized_conv():
    torch.manual_seed(0)
    net = torch.nn.Conv2d(8, 16, 3).eval()
    batches = [images(16) for _ in range(4)]
    graph = quantize_graph(from_torch(net, batches[0], dynamic_batch=True), 'TRT_INT8')
    set_activation_observer(graph, 'minmax')
    return calibrate(graph, batches, progress=False), batches


def test_adaround_reconstructs_better_than_nearest_on_seen_and_unseen_data():
    graph, batches = quantized_conv()
    held_out = [images(16) for _ in range(2)]
    nearest = layer_error(graph, batches), layer_error(graph, held_out)
    result = AdaRound(steps=300)(graph, batches)
    assert result.changes == 1
    learned = layer_error(graph, batches), layer_error(graph, held_out)
    assert learned[0] < 0.9 * nearest[0], (learned, nearest)
    assert learned[1] < nearest[1], (learned, nearest)


def test_adarounded_weights_are_on_the_grid_and_the_fp32_weights_stay_aside():
    graph, batches = quantized_conv()
    op, = weight_layers(graph)
    fp32 = op.inputs[1].value.clone()
    AdaRound(steps=50)(graph, batches)
    config = op.input_quant_config[1]
    steps = op.inputs[1].value / config.scale.reshape(-1, 1, 1, 1)
    assert torch.allclose(steps, steps.round(), atol=1e-3)
    assert ((op.inputs[1].value - fp32).abs() <= config.scale.reshape(-1, 1, 1, 1)).all()
    dequantize_graph(graph)
    assert torch.equal(op.inputs[1].value, fp32)
    restore_quantize_state(graph)
    before = QuantExecutor(graph)(batches[0])[0]
    bake_parameters(graph)  # baking a rounded weight changes nothing
    assert torch.equal(QuantExecutor(graph)(batches[0])[0], before)


def test_adarounded_graph_exports_what_it_simulates(tmp_path):
    graph, batches = quantized_conv()
    AdaRound(steps=50)(graph, batches)
    export_graph(graph, tmp_path / 'conv.onnx')
    session = int8_session(tmp_path / 'conv.onnx')  # unfused where int8 kernels saturate
    name = session.get_inputs()[0].name
    theirs = torch.from_numpy(session.run(None, {name: batches[1].numpy()})[0])
    output_scale = graph.operations[weight_layers(graph)[0].name].output_quant_config[0].scale
    assert (theirs - QuantExecutor(graph)(batches[1])[0]).abs().max() <= output_scale + 1e-6
