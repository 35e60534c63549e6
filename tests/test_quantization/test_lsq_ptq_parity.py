"""An untrained LSQGraph computes what its calibrated (PTQ) graph computes, bit for bit,
whatever the rounding, and a checkpoint brings the exact scales it started from."""
import pytest
import torch
from test_lsq_graph_inputs import conv_net, data

from razorlib.engine.checkpoint_check import check_fits
from razorlib.ir import RoundingPolicy
from razorlib.quantization import (LSQGraph, QuantExecutor, quantable_operations,
                                   quantize_torch_model)


def rounded(rounding, platform='TRT_INT8', seed=0):
    """A graph calibrated on ``data(seed=seed)``, every config rounding with ``rounding``."""
    batches = data(seed=seed)
    graph = quantize_torch_model(conv_net(), batches, batches[0], platform, progress=False,
                                 dispatcher='allin')
    for op in quantable_operations(graph):
        for config in op.input_quant_config + op.output_quant_config:
            config.rounding = rounding
    return graph


def scales(graph):
    return [config.scale for op in quantable_operations(graph)
            for config in op.input_quant_config + op.output_quant_config
            if config.state.is_quantized]


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
@pytest.mark.parametrize('rounding', list(RoundingPolicy))
def test_an_untrained_lsq_graph_is_its_ptq_graph_bit_for_bit(rounding, platform):
    graph = rounded(rounding, platform)
    ptq = graph.copy(copy_value=True)
    lsq = LSQGraph(graph)
    x = torch.cat(data(4, seed=9))
    with torch.no_grad():
        expected = QuantExecutor(ptq)(x)[0]
        # exp(log(s)) is an ulp off 17 of the 21 scales: ROUND_DOWN / ROUND_UP were 0.007
        # (a step) off, the half roundings 3e-8
        assert torch.equal(lsq(x), expected)
        assert torch.equal(QuantExecutor(lsq.calibrated_graph())(x)[0], expected)
    assert all(torch.equal(a, b) for a, b in zip(scales(lsq.calibrated_graph()), scales(ptq)))


def test_the_exact_starting_scale_keeps_the_gradient_of_exp():
    graph = rounded(RoundingPolicy.ROUND_DOWN)
    ptq = graph.operations['node_conv2d'].input_quant_config[0].scale.clone()
    lsq = LSQGraph(graph)
    op = graph.operations['node_conv2d']
    scale = lsq.scale_of(op, op.input_quant_config[0])
    scale.sum().backward()
    learned = [log_scale for log_scale in lsq.scales.values() if log_scale.grad is not None]
    assert torch.equal(scale.detach(), ptq) and not torch.equal(ptq.log().exp(), ptq)
    assert len(learned) == 1  # d exp(l) / dl = exp(l): Adam's steps are relative, as before
    assert torch.equal(learned[0].grad, learned[0].detach().exp())


def test_a_checkpoint_restores_the_exact_starting_scales(tmp_path):
    down = RoundingPolicy.ROUND_DOWN
    saved = LSQGraph(rounded(down))
    target = LSQGraph(rounded(down, seed=1))  # other data: other calibrated scales
    state = saved.state_dict()
    check_fits(target, state, tmp_path / 'lsq.pth')
    target.load_state_dict(state)
    x = torch.cat(data(4, seed=9))
    # without the starting scales it ran exp(the loaded log scales): 0.0034 (a step) off
    with torch.no_grad():
        assert torch.equal(target(x), saved(x))
    assert all(torch.equal(a, b) for a, b in zip(scales(target.calibrated_graph()),
                                                 scales(saved.calibrated_graph())))


def test_a_checkpoint_without_starting_scales_loads_with_this_graphs(tmp_path):
    saved = LSQGraph(rounded(RoundingPolicy.ROUND_DOWN))
    target = LSQGraph(rounded(RoundingPolicy.ROUND_DOWN))
    old = {key: value for key, value in saved.state_dict().items()
           if not key.startswith('initial_scales.')}
    check_fits(target, old, tmp_path / 'old.pth')  # the tools' key check lets it through
    target.load_state_dict(old)  # strict: nothing reported missing
    x = torch.cat(data(4, seed=9))
    with torch.no_grad():
        assert torch.equal(target(x), saved(x))
