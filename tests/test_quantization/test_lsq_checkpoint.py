"""An LSQGraph / QAT checkpoint carries its quantization signature: it loads only into a
graph quantized the same way, and brings its zero points with it."""
import pytest
import torch

from razorlib.algorithms import QAT
from razorlib.engine.checkpoint_check import CheckpointError, check_fits
from razorlib.quantization import LSQGraph, quantize_torch_model

NET = dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(4, 8)),
           head=dict(type='LinearClsHead', num_classes=3))


def conv_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 4, 3)).eval()


def data(shift=0.0, scale=1.0, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(8, 3, 8, 8, generator=generator) * scale + shift for _ in range(2)]


def lsq(platform, batches, net=None):
    net = conv_net() if net is None else net
    return LSQGraph(quantize_torch_model(net, batches, batches[0], platform, progress=False))


def offsets(module):
    graph = module.calibrated_graph()
    return [config.offset for op in graph.operations.values()
            for config in getattr(op, 'input_quant_config', []) if config.offset is not None]


def test_zero_points_come_from_the_checkpoint(tmp_path):
    trained, other = lsq('ORT_INT8', data()), lsq('ORT_INT8', data(0.5, 2.0, seed=1))
    with torch.no_grad():
        for scale in trained.scales.values():
            scale.add_(0.05)
    x = data(seed=2)[0]
    assert any(not torch.equal(a, b) for a, b in zip(offsets(trained), offsets(other)))
    path = tmp_path / 'lsq.pth'
    torch.save(trained.state_dict(), path)
    state = torch.load(path, weights_only=True)  # what the tools read
    check_fits(other, state, path)
    other.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(offsets(trained), offsets(other)))
    with torch.no_grad():
        assert torch.equal(other(x), trained(x))
    again = other.state_dict()  # and it saves the zero points it now uses
    assert all(torch.equal(again[key], value) for key, value in state.items())


@pytest.mark.parametrize('saved, loaded', [('TRT_INT8', 'ORT_INT8'), ('ORT_INT8', 'TRT_INT8')])
def test_a_checkpoint_of_another_platform_is_refused(saved, loaded):
    state = lsq(saved, data()).state_dict()
    target = lsq(loaded, data())
    before = {key: value.clone() for key, value in target.state_dict().items()}
    with pytest.raises(ValueError, match=f'quantized for {saved}, this graph for {loaded}'):
        target.load_state_dict(state)
    assert all(torch.equal(before[key], value) for key, value in target.state_dict().items())


def test_a_checkpoint_of_another_architecture_leaves_the_graph_as_it_was():
    """torch raises a size mismatch only after copying every tensor that fits, and the
    signature check had set the zero points it found: the graph is left as it was."""
    wider = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 4, 3)).eval()
    state = lsq('ORT_INT8', data(0.5, 2.0, seed=1), wider).state_dict()
    target = lsq('ORT_INT8', data())
    x = data(seed=2)[0]
    with torch.no_grad():
        output = target(x)
    before = {key: value.clone() for key, value in target.state_dict().items()}
    zero_points = [offset.clone() for offset in offsets(target)]
    with pytest.raises(RuntimeError, match='size mismatch'):
        target.load_state_dict(state)
    assert all(torch.equal(before[key], value) for key, value in target.state_dict().items())
    assert all(torch.equal(a, b) for a, b in zip(zero_points, offsets(target)))
    with torch.no_grad():
        assert torch.equal(target(x), output)


def test_a_scale_quantized_otherwise_is_named():
    state = lsq('TRT_INT8', data()).state_dict()
    key = next(key for key in state if key.startswith('quant_signature.node'))
    state[key] = state[key].clone()
    state[key][1] = 255  # quant_max
    with pytest.raises(ValueError, match=rf"scale '{key.split('.')[1]}' is quantized "
                                         "otherwise: quant_max 255 in the checkpoint, 127 here"):
        lsq('TRT_INT8', data()).load_state_dict(state)


def test_a_checkpoint_from_before_the_signature_loads_unchecked_and_says_so():
    trained = lsq('ORT_INT8', data())
    old = {key: value for key, value in trained.state_dict().items()
           if not key.startswith(('quant_signature.', 'zero_points.'))}
    target = lsq('ORT_INT8', data(0.5, 2.0, seed=1))
    own = offsets(target)
    with pytest.warns(UserWarning, match='predates the quantization signature .* loaded '
                                         "unchecked, with the zero points of this graph"):
        target.load_state_dict(old)  # strict: nothing reported missing
    assert all(torch.equal(a, b) for a, b in zip(offsets(target), own))
    assert all(torch.equal(target.state_dict()[key], value) for key, value in old.items())


def test_a_trt_qat_checkpoint_does_not_load_into_an_ort_qat():
    torch.manual_seed(0)
    images = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    trt = QAT(NET, images, dict(calib_steps=2, platform='TRT_INT8'))
    state = trt.state_dict()
    assert 'quantized.quant_signature.platforms' in state
    ort = QAT(NET, images, dict(calib_steps=2, platform='ORT_INT8'))
    with pytest.raises(ValueError, match='quantized for TRT_INT8, this graph for ORT_INT8'):
        ort.load_state_dict(state)
    same = QAT(NET, images, dict(calib_steps=2, observer='minmax'))  # same ranges: loads
    same.load_state_dict(state)
    with torch.no_grad():
        assert torch.equal(same(images[0]), trt(images[0]))


def test_a_qat_checkpoint_from_before_the_signature_passes_the_tools_key_check(tmp_path):
    # tools/deploy.py runs check_fits before loading: it reported the signature missing
    torch.manual_seed(0)
    images = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    trained = QAT(NET, images, dict(calib_steps=2))
    old = {key: value for key, value in trained.state_dict().items()
           if '.quant_signature.' not in key and '.zero_points.' not in key}
    target = QAT(NET, images, dict(calib_steps=2))
    check_fits(target, old, tmp_path / 'old.pth')
    with pytest.warns(UserWarning, match='predates the quantization signature'):
        target.load_state_dict(old)
    del old[next(iter(old))]  # any other key missing is still refused
    with pytest.raises(CheckpointError, match='1 of the model'):
        check_fits(target, old, tmp_path / 'old.pth')


def biased_net():
    """A conv whose bias overflows int32 at input x weight scale on tiny inputs: ONNX
    Runtime's calibration then leaves it FP32, on ordinary inputs it is int32 (PASSIVE)."""
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
                              torch.nn.Conv2d(4, 4, 3)).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        net[0].bias.fill_(2.0)
    return net


def bias_state(module):
    return module.calibrated_graph().operations['node_conv2d'].input_quant_config[2].state.name


@pytest.mark.parametrize('saved, loaded, states', [
    (1e-5, 1.0, 'FP32 in the checkpoint, int32 \\(PASSIVE\\) here'),
    (1.0, 1e-5, 'int32 \\(PASSIVE\\) in the checkpoint, FP32 here')])
def test_a_bias_quantized_otherwise_is_refused_naming_it(saved, loaded, states, tmp_path):
    trained = lsq('ORT_INT8', data(scale=saved), biased_net())
    target = lsq('ORT_INT8', data(scale=loaded, seed=1), biased_net())
    assert {bias_state(trained), bias_state(target)} == {'FP32', 'PASSIVE'}
    state = trained.state_dict()
    check_fits(target, state, tmp_path / 'lsq.pth')  # the same keys: only the flags differ
    # it loaded and clamped the bias at the other graph's scales: 0.89 off
    with pytest.raises(ValueError, match=rf"^LSQGraph checkpoint: bias '0.bias' \(of "
                                         rf"\['node_conv2d'\]\) is {states} .*calibration "
                                         "data it was trained with$"):
        target.load_state_dict(state)


def version_1(state):
    """``state`` as LSQGraph saved it before the biases' flags (signature version 1)."""
    old = {key: value for key, value in state.items() if key != 'quant_signature.int32_biases'}
    old['quant_signature.version'] = torch.tensor(1)
    return old


def test_a_version_1_signature_loads_where_no_bias_can_be_int32():
    trained = lsq('TRT_INT8', data())  # TensorRT keeps every bias FP32
    with torch.no_grad():
        for scale in trained.scales.values():
            scale.add_(0.05)
    target = lsq('TRT_INT8', data(seed=1))
    target.load_state_dict(version_1(trained.state_dict()))
    x = data(seed=2)[0]
    with torch.no_grad():
        assert torch.equal(target(x), trained(x))


def test_a_version_1_signature_is_refused_where_biases_may_differ_until_recorded():
    trained = lsq('ORT_INT8', data())
    target = lsq('ORT_INT8', data(seed=1))
    old = version_1(trained.state_dict())
    with pytest.raises(ValueError, match=r"signature \(version 1\) does not record .* this "
                                         r"graph's biases \('0.bias', '2.bias'\) can be either"
                                         r".*state_dict\['quant_signature.int32_biases'\] = "):
        target.load_state_dict(old)
    old['quant_signature.int32_biases'] = target.quant_signature.int32_biases.clone()
    target.load_state_dict(old)  # what the message says to do, knowing they were int32
    x = data(seed=2)[0]
    with torch.no_grad():
        assert torch.equal(target(x), trained(x))
