"""ActivationCentering: FP32-exact, the centred ReLU6 output rounded at twice the
resolution, only where every reader absorbs the shift, and exported as simulated."""
import contextlib
import logging

import pytest
import torch

from razorlib.ir import QuantizationStates, from_torch
from razorlib.quantization import (ActivationCentering, QuantExecutor, export_graph,
                                   prepare_graph, quantize_torch_model, snr_db)
from razorlib.quantization.passes import centerable_clips
from razorlib.quantization.state import bake_parameters, dequantized, quantable_operations

from ptq_helpers import STEPS, run_onnxruntime, worst_steps


def block(padding: int = 0, head: bool = True) -> torch.nn.Module:
    """1x1 expand -> ReLU6 -> 3x3 depthwise (``padding``) -> ReLU6 -> 1x1 project, and a
    ReLU6 -> pooled Linear head: MobileNetV2's layer kinds, the expansion's ReLU6 driven
    across its whole [0, 6] range."""
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(3, 8, 1), torch.nn.ReLU6(),
              torch.nn.Conv2d(8, 8, 3, padding=padding, groups=8), torch.nn.ReLU6(),
              torch.nn.Conv2d(8, 4, 1)]
    net = torch.nn.Sequential(*layers)
    with torch.no_grad():
        net[0].weight.mul_(4)
    if head:
        net = torch.nn.Sequential(net, torch.nn.ReLU6(), torch.nn.Flatten(),
                                  torch.nn.Linear(4 * (6 if padding else 4) ** 2, 5))
    return net.eval()


def data(count: int = 4):
    torch.manual_seed(1)
    return [torch.randn(16, 3, 6, 6) for _ in range(count)]


def quantized(net, batches, platform='TRT_INT8'):
    return quantize_torch_model(net, batches, batches[0], platform, progress=False)


def prepared(net, x):
    """The graph as the quantizer sees it: the exporter's shared Clip bounds split."""
    return prepare_graph(from_torch(net, x), x)


def test_finds_the_clips_whose_readers_absorb_a_shift():
    x = data(1)[0]
    assert centerable_clips(from_torch(block(padding=0), x)) == []  # shared bounds
    graph = prepared(block(padding=0), x)
    clips = [op.name for op in graph.topological_sort() if op.type == 'Clip']
    # the head's ReLU6 is read by a Flatten (no bias to absorb it): left alone
    assert [(c.name, [r.type for r in readers]) for _, c, readers in centerable_clips(graph)
            ] == [(clips[0], ['Conv']), (clips[1], ['Conv'])]
    padded = prepared(block(padding=1), x)
    clips = [op.name for op in padded.topological_sort() if op.type == 'Clip']
    # the expansion's output is read by a padded conv: its borders would see x = c
    assert [c.name for _, c, _ in centerable_clips(padded)] == [clips[1]]
    # unless that padding moves out into a Pad of the shifted zero
    assert [c.name for _, c, _ in centerable_clips(padded, explicit_pads=True)] == clips[:2]
    assert centerable_clips(prepared(block(padding=1, head=False), x), explicit_pads=True
                            )[0][2][0].attributes['pads'] == [1, 1, 1, 1]  # found, not moved
    no_head = prepared(block(head=False), x)
    assert len(centerable_clips(no_head)) == 2
    linear = prepared(torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU6(),
                                          torch.nn.Linear(8, 3)), torch.randn(2, 6))
    assert [[r.type for r in readers] for _, _, readers in centerable_clips(linear)] == [['Gemm']]


@pytest.mark.parametrize('net, explicit_pads, count', [
    (block(), False, 2), (block(padding=1), True, 2),
    (torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU6(),
                         torch.nn.Linear(8, 3)).eval(), False, 1)],
    ids=['convs', 'padded convs, explicit pads', 'gemms'])
def test_the_fp32_reference_and_the_quantized_graph_compute_what_they_did(
        net, explicit_pads, count):
    torch.manual_seed(2)
    batches = data() if isinstance(net[0], torch.nn.Sequential) else [
        torch.randn(16, 6) * 3 for _ in range(4)]
    graph = quantized(net, batches)
    executor = QuantExecutor(graph)  # kernels take constant operands (Clip bounds) once
    clips = [op for op in graph.topological_sort() if op.type == 'Clip']
    roots = [clip.output_quant_config[0].dominated_by for clip in clips]
    scales = [root.scale.clone() for root in roots]
    with torch.no_grad():
        with dequantized(graph):
            fp32_before = [executor(b)[0] for b in batches]
        for root in roots:  # the centred tensors in floating point: the rest as quantized
            root.state = QuantizationStates.FP32
        rest_before = [executor(b)[0] for b in batches]
        for root in roots:
            root.state = QuantizationStates.ACTIVATED
    result = ActivationCentering(explicit_pads=explicit_pads)(graph, batches)
    shifts = graph.extension_attrib['activation_centering']
    centred = [clip for clip in clips if clip.name in shifts]
    assert result.changes == len(centred) == count
    executor = QuantExecutor(graph)
    for clip, root, scale in zip(clips, roots, scales):
        if clip.name in shifts:  # half the scale; -shift lands on code -127
            torch.testing.assert_close(root.scale, scale / 2)
            assert shifts[clip.name] == pytest.approx(float(scale) / 2 * 127, abs=1e-4)
            assert [float(v.value) for v in clip.inputs[1:]] == pytest.approx(
                [-shifts[clip.name], 6 - shifts[clip.name]], abs=1e-5)
    with torch.no_grad():
        with dequantized(graph):
            for batch, expected in zip(batches, fp32_before):
                torch.testing.assert_close(executor(batch)[0], expected, rtol=1e-4,
                                           atol=1e-5)
        for root in roots:
            root.state = QuantizationStates.FP32
        for batch, expected in zip(batches, rest_before):  # weights as they run absorb it
            torch.testing.assert_close(executor(batch)[0], expected, rtol=1e-4, atol=1e-5)
        for root in roots:
            root.state = QuantizationStates.ACTIVATED


@contextlib.contextmanager
def activations_alone(graph, root=None):
    """Every activation but ``root``'s in floating point, for the block; the weights stay
    quantized (a reader's bias absorbs the shift with its weights as they run)."""
    saved = [(config, config.state) for op in quantable_operations(graph)
             for config, var in op.config_with_variable
             if config.state.is_activated and not var.is_parameter
             and config.dominated_by is not root]
    for config, _ in saved:
        config.state = QuantizationStates.FP32
    try:
        yield graph
    finally:
        for config, state in saved:
            config.state = state


def noise_and_snr(net, graph, batches, root):
    """The noise ``root``'s tensor alone adds to the output (the weights' rounding
    measured alone and taken out), and the output's SNR with everything quantized."""
    reference = torch.cat([net(b) for b in batches]).detach()
    executor = QuantExecutor(graph)

    def noise():
        output = torch.cat([executor(b)[0] for b in batches])
        return float((output - reference).double().square().mean())

    with torch.no_grad():
        with activations_alone(graph):
            weights = noise()
        with activations_alone(graph, root):
            tensor = noise() - weights
        return tensor, snr_db(reference, torch.cat([executor(b)[0] for b in batches]))


def centred_tensor_noise(net, graph, batches, root):
    return noise_and_snr(net, graph, batches, root)[0]


def test_the_centred_tensor_rounds_at_twice_the_resolution():
    """The noise the centred tensor adds to the output falls by 4 (6 dB), and with
    everything quantized the output's SNR rises."""
    net, batches = block(head=False), data()
    graph = quantized(net, batches)
    clip = [op for op in graph.topological_sort() if op.type == 'Clip'][0]
    root = clip.output_quant_config[0].dominated_by
    tensor_before, output_before = noise_and_snr(net, graph, batches, root)
    ActivationCentering()(graph, batches)
    tensor_after, output_after = noise_and_snr(net, graph, batches, root)
    assert 3.5 < tensor_before / tensor_after < 5.0  # 4.6 here
    assert output_after > output_before + 0.5


def test_asymmetric_activations_and_unknown_clips_are_left_or_refused(caplog):
    batches = data()
    graph = quantized(block(), batches, 'ORT_INT8')  # uint8 already uses every code
    with caplog.at_level(logging.INFO, logger='razorlib.quantization.passes.centering'):
        assert ActivationCentering()(graph, batches).changes == 0
    clips = sorted(clip.name for _, clip, _ in centerable_clips(graph))
    assert len(clips) == 2
    assert f'left {clips}: not quantized by a calibrated, symmetric' in caplog.text
    graph = quantized(block(), batches)
    with pytest.raises(KeyError, match=r"ActivationCentering: graph '.*' has no centerable "
                                       r"Clip \['nope'\]; it has \["):
        ActivationCentering(clips=['nope'])(graph, batches)
    first = centerable_clips(graph)[0][1].name
    assert ActivationCentering(clips=[first])(graph, batches).changes == 1
    assert list(graph.extension_attrib['activation_centering']) == [first]


def test_centred_graph_exports_qdq_onnx_that_onnxruntime_runs_as_simulated(tmp_path):
    batches = data()
    graph = quantize_torch_model(block(), batches, batches[0], 'TRT_INT8', progress=False,
                                 ptq_passes=['ActivationCentering', 'AdaRound',
                                             'BiasCorrection'])
    assert len(graph.extension_attrib['activation_centering']) == 2
    model = export_graph(graph, tmp_path / 'block.onnx', 'QDQ_ONNX')
    clips = [node for node in model.graph.node if node.op_type == 'Clip']
    assert clips and any(node.op_type == 'QuantizeLinear' for node in model.graph.node)
    theirs = run_onnxruntime(model, [batches[1]])
    with torch.no_grad():
        ours = QuantExecutor(graph)(batches[1])
    assert worst_steps(graph, ours, theirs) <= STEPS


def test_explicit_pads_move_a_padded_readers_padding_into_a_pad_of_the_shifted_zero(tmp_path):
    """The expansion's output, read by a padded depthwise conv, is centred: the conv loses
    its pads to a Pad of value -c that shares the tensor's scale (-c is code -127), the
    tensor's own noise falls by 4, and onnxruntime runs the export as simulated."""
    net, batches = block(padding=1, head=False), data()
    graph = quantized(net, batches)
    clip = [op for op in graph.topological_sort() if op.type == 'Clip'][0]
    root = clip.output_quant_config[0].dominated_by
    depthwise = clip.outputs[0].dest_ops[0]
    tensor_before = centred_tensor_noise(net, graph, batches, root)
    ActivationCentering(explicit_pads=True)(graph, batches)
    shift = graph.extension_attrib['activation_centering'][clip.name]
    pad = depthwise.inputs[0].source_op
    assert (pad.type, pad.inputs[0]) == ('Pad', clip.outputs[0])
    assert pad.outputs[0].dest_ops == [depthwise]
    assert depthwise.attributes['pads'] == [0, 0, 0, 0]
    assert pad.inputs[1].value.tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert float(pad.inputs[2].value) == pytest.approx(-shift)
    assert float(pad.inputs[2].value / root.scale) == pytest.approx(-127, abs=1e-4)
    assert all(config.dominated_by is root
               for config in (pad.input_quant_config[0], pad.output_quant_config[0]))
    assert [config.state for config in pad.input_quant_config[1:]] == [
        QuantizationStates.FP32] * 2
    assert pad.outputs[0].shape == ('batch', 8, 8, 8)
    assert 3.5 < tensor_before / centred_tensor_noise(net, graph, batches, root) < 5.0
    with torch.no_grad(), dequantized(graph):
        for batch in batches:
            torch.testing.assert_close(QuantExecutor(graph)(batch)[0], net(batch),
                                       rtol=1e-4, atol=1e-5)
    model = export_graph(graph, tmp_path / 'padded.onnx', 'QDQ_ONNX')
    assert [node.op_type for node in model.graph.node].count('Pad') == 1
    theirs = run_onnxruntime(model, [batches[1]])
    with torch.no_grad():
        ours = QuantExecutor(graph)(batches[1])
    assert worst_steps(graph, ours, theirs) <= STEPS


def test_add_to_parameter_refuses_baked_values_and_dequantized_operations():
    batches = data()
    graph = quantized(block(head=False), batches)
    conv = next(op for op in graph.topological_sort() if op.type == 'Conv')
    conv.dequantize()
    with pytest.raises(RuntimeError, match='is dequantized: call restore_quantize_state'):
        conv.add_to_parameter(2, torch.tensor(1.0))
    conv.restore_quantize_state()
    with pytest.raises(ValueError, match='input 0 .* is no parameter'):
        conv.add_to_parameter(0, torch.tensor(1.0))
    conv.baking_parameters(lambda value, config: value)
    with pytest.raises(RuntimeError, match='is baked .* add to it before baking'):
        conv.add_to_parameter(1, torch.tensor(1.0))


def test_after_adaround_the_fp32_reference_still_sums_the_fp32_weights():
    """Listed after AdaRound (whose rounded weights are in use, the FP32 ones kept
    aside), the readers' FP32 biases take the FP32 weights' sums: the dequantized graph
    is still the model."""
    net, batches = block(head=False), data()
    graph = quantize_torch_model(net, batches, batches[0], 'TRT_INT8', progress=False,
                                 ptq_passes=[dict(type='AdaRound', steps=20),
                                             'ActivationCentering'])
    assert len(graph.extension_attrib['activation_centering']) == 2
    executor = QuantExecutor(graph)
    with torch.no_grad(), dequantized(graph):
        for batch in batches:
            torch.testing.assert_close(executor(batch)[0], net(batch), rtol=1e-4, atol=1e-5)


def test_a_clip_whose_bounds_another_op_reads_is_left_alone():
    """Moving shared bounds would move the other reader's too."""
    graph = prepared(block(head=False), data(1)[0])
    first, second = [op for op in graph.topological_sort() if op.type == 'Clip'][:2]
    shared = first.inputs[1]
    graph.replace_input(second, 1, shared)  # both Clips read one lower bound
    assert [clip.name for _, clip, _ in centerable_clips(graph)] == []


def test_a_second_run_centres_nothing_more_and_a_baked_graph_stays_exact():
    net, batches = block(head=False), data()
    graph = quantized(net, batches)
    assert ActivationCentering()(graph, batches).changes == 2
    shifts = dict(graph.extension_attrib['activation_centering'])
    assert ActivationCentering()(graph, batches).changes == 0  # its Clips start at -c now
    assert graph.extension_attrib['activation_centering'] == shifts
    baked = bake_parameters(quantized(net, batches))  # weights hold their quantized numbers
    roots = [clip.output_quant_config[0].dominated_by for _, clip, _ in centerable_clips(baked)]

    def with_roots_in_float():
        executor = QuantExecutor(baked)
        for root in roots:
            root.state = QuantizationStates.FP32
        try:
            with torch.no_grad():
                return [executor(b)[0] for b in batches]
        finally:
            for root in roots:
                root.state = QuantizationStates.ACTIVATED

    before = with_roots_in_float()
    assert ActivationCentering()(baked, batches).changes == 2
    for expected, after in zip(before, with_roots_in_float()):
        torch.testing.assert_close(after, expected, rtol=1e-4, atol=1e-5)


def gemm_pair(beta: float, reader_beta: float = 1.0):
    """An ONNX ``Gemm(beta) -> Clip(0, 6) -> Gemm(reader_beta)``: Gemms whose biases
    count ``beta`` times (torch's Linear always exports ``beta = 1``)."""
    onnx = pytest.importorskip('onnx')
    from onnx import TensorProto, helper, numpy_helper
    torch.manual_seed(3)
    values = {'w1': torch.randn(16, 12), 'b1': torch.randn(16), 'w2': torch.randn(5, 16) * 0.3,
              'b2': torch.randn(5), 'lo': torch.tensor(0.0), 'hi': torch.tensor(6.0)}
    nodes = [helper.make_node('Gemm', ['x', 'w1', 'b1'], ['h'], beta=beta, transB=1),
             helper.make_node('Clip', ['h', 'lo', 'hi'], ['a']),
             helper.make_node('Gemm', ['a', 'w2', 'b2'], ['y'], beta=reader_beta, transB=1)]
    graph = helper.make_graph(
        nodes, 'gemm_pair', [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['n', 12])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['n', 5])],
        [numpy_helper.from_array(value.numpy(), name) for name, value in values.items()])
    return helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid('', 13)])


@pytest.mark.parametrize('beta, reader_beta', [(0.5, 1.0), (2.0, 1.0), (1.0, 0.5), (1.0, 2.0)],
                         ids=['producer 0.5', 'producer 2', 'reader 0.5', 'reader 2'])
def test_a_gemm_whose_bias_counts_beta_times_takes_the_shift_over_beta(beta, reader_beta):
    from razorlib.quantization import quantize_onnx_model
    batches = [torch.randn(8, 12) * 2 for _ in range(3)]
    graph = quantize_onnx_model(gemm_pair(beta, reader_beta), batches, batches[0], 'TRT_INT8',
                                calib_steps=3, progress=False, dispatcher='aggressive')
    with torch.no_grad(), dequantized(graph):
        before = QuantExecutor(graph)(batches[0])[0]
    assert ActivationCentering()(graph, batches).changes == 1
    with torch.no_grad(), dequantized(graph):
        torch.testing.assert_close(QuantExecutor(graph)(batches[0])[0], before, rtol=1e-5,
                                   atol=1e-5)


def test_a_gemm_that_drops_its_bias_beta_0_takes_no_shift():
    from razorlib.ir import from_onnx
    x = torch.randn(2, 12)
    for beta, reader_beta in ((0.0, 1.0), (1.0, 0.0)):  # the producer's, the reader's
        graph = prepare_graph(from_onnx(gemm_pair(beta, reader_beta)), x)
        assert centerable_clips(graph) == []
    assert len(centerable_clips(prepare_graph(from_onnx(gemm_pair(1.0)), x))) == 1
