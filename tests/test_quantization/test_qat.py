"""QAT: LSQ's gradients, training that beats PTQ, the QAT algorithm through tools/train.py,
and its QDQ export run by onnxruntime as razorlib simulates it."""
import importlib.util
import re
from pathlib import Path

import pytest
import torch

from razorlib.algorithms import QAT
from razorlib.quantization import (LSQGraph, QuantExecutor, export_graph, int8_session,
                                   lsq_fake_quantize, quantize_torch_model, snr_db)

REPO = Path(__file__).parents[2]
CONFIG = REPO / 'configs' / 'quantization' / 'qat' / 'qat_plaincnn_digits_trt_int8.py'
NET = dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(8, 16)),
           head=dict(type='LinearClsHead', num_classes=4))


def test_lsq_gradients_are_the_papers():
    x = torch.tensor([0.26, -0.14, 30.0, -30.0], requires_grad=True)
    s = torch.tensor(0.1, requires_grad=True)
    lsq_fake_quantize(x, s, torch.tensor(0.0), -128, 127, grad_factor=0.5).sum().backward()
    # in range: round(x/s) - x/s; clipped: the bound
    expected = 0.5 * ((3 - 2.6) + (-1 + 1.4) + 127 - 128)
    assert torch.equal(x.grad, torch.tensor([1.0, 1.0, 0.0, 0.0]))
    assert s.grad.item() == pytest.approx(expected, abs=1e-5)


def ort_run(path, images):
    session = int8_session(path)  # unfused where this CPU's int8 kernels saturate
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: images.numpy()})[0])


def test_lsq_training_beats_ptq_and_exports_what_it_simulates(tmp_path):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3),
                              torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(8 * 4 * 4, 4)).eval()
    batches = [torch.randn(32, 3, 8, 8) for _ in range(4)]
    batches[0][0, 0, 0, 0] = 60.0  # one outlier: min-max calibration ranges far too wide
    held_out = torch.randn(64, 3, 8, 8)
    with torch.no_grad():
        reference = net(held_out)
    graph = quantize_torch_model(net, batches, batches[0], progress=False, observer='minmax')
    ptq = snr_db(reference, QuantExecutor(graph)(held_out)[0])
    lsq = LSQGraph(graph)
    optimizer = torch.optim.Adam([dict(params=lsq.weights.parameters(), lr=1e-4),
                                  dict(params=lsq.scales.parameters(), lr=0.02)])
    for _ in range(60):
        images = torch.randn(64, 3, 8, 8)
        with torch.no_grad():
            target = net(images)
        loss = (lsq(images) - target).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    trained = lsq.calibrated_graph()
    qat = snr_db(reference, QuantExecutor(trained)(held_out)[0])
    assert qat > ptq + 5, (ptq, qat)  # measured: 19.8 -> 26.5 dB after 50 steps
    export_graph(trained, tmp_path / 'qat.onnx')
    ours = QuantExecutor(trained)(held_out)[0]
    # onnxruntime fuses the QDQ pairs into integer kernels: a value lands on another
    # rounding step now and then
    assert (ort_run(tmp_path / 'qat.onnx', held_out) - ours).abs().max() < 0.02 * ours.abs().max()


def test_a_qat_checkpoint_restores_the_trained_model():
    images = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    model = QAT(NET, images, dict(calib_steps=2))
    with torch.no_grad():
        for scale in model.quantized.scales.values():
            scale.mul_(1.1)
    again = QAT(NET, images, dict(calib_steps=2))
    again.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(again(images[0]), model(images[0]))


def test_a_checkpoint_with_other_clip_bounds_runs_with_the_loaded_bounds():
    """A Clip's bounds are decoded once by the executor; a checkpoint whose bounds differ
    from the built graph's (centred ReLU6 outputs, loaded into a QAT built without
    ActivationCentering) must run with its own, as its graph does."""
    def net():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), torch.nn.ReLU6(),
                                    torch.nn.Conv2d(8, 4, 1), torch.nn.AdaptiveAvgPool2d(1),
                                    torch.nn.Flatten()).eval()
        with torch.no_grad():
            model[0].weight.mul_(4)  # the ReLU6 output spans [0, 6]
        return model

    images = [torch.randn(4, 3, 6, 6) for _ in range(2)]
    centred = QAT(net(), images, dict(calib_steps=2, ptq_passes=['ActivationCentering']))
    assert len(centred.calibrated_graph().extension_attrib['activation_centering']) == 1
    plain = QAT(net(), images, dict(calib_steps=2))
    plain.load_state_dict(centred.state_dict())
    with torch.no_grad():
        expected = QuantExecutor(centred.calibrated_graph())(images[0])[0]
        assert torch.equal(centred(images[0]), expected)
        assert torch.equal(plain(images[0]), expected)  # was 1.7 off: the built bounds
    lsq = plain.quantized  # its graph still reads the module's parameters (they train)
    assert all(lsq._graph.variables[name].value is lsq.weights[key]
               for key, name in lsq._variables.items())


def test_qat_predicts_scores_and_refuses_an_unknown_mode():
    images = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    model = QAT(NET, images, dict(calib_steps=2, platform='ORT_INT8'))
    samples = model(images[0], mode='predict')
    assert len(samples) == 4 and samples[0].pred_score.shape == (4, )
    with pytest.raises(ValueError, match="mode must be 'tensor', 'loss' or 'predict'"):
        model(images[0], mode='features')


@pytest.mark.parametrize('quantization, message', [
    (dict(platform='ORT_INT8', export='TRT_JSON'),
     'QAT quantization.export TRT_JSON: TensorRT dynamic ranges are symmetric and per tensor, '
     'so they need the TRT_INT8 platform, not quantization.platform ORT_INT8'),
    (dict(platform='ORT_INT8', export=dict(type='TRT_INT8')),
     'QAT quantization.export TRT_INT8: the graph is quantized for quantization.platform '
     'ORT_INT8'),
])
def test_an_export_the_platform_cannot_write_is_refused_before_calibration(
        quantization, message):
    """QATExportHook exports after training: an export the graph cannot be written as
    must fail at construction, before any batch is drawn, not after the run."""
    def no_batches():
        raise AssertionError('calibration batches were drawn')
        yield  # pragma: no cover

    with pytest.raises(ValueError, match=re.escape(message)):
        QAT(NET, no_batches(), dict(calib_steps=2, **quantization))


@pytest.mark.slow  # a whole tools/train.py run
@pytest.mark.parametrize('config', ['trt', 'ort'])
def test_tools_train_runs_qat_and_writes_the_qdq_model(tmp_path, config):
    from mmengine.config import Config

    from razorlib.registry import MODELS, register_all_modules
    register_all_modules()
    fp32 = MODELS.build(Config.fromfile(REPO / 'configs' / '_base_' / 'models' /
                                        'plaincnn_digits.py').model)
    torch.save(fp32.state_dict(), tmp_path / 'fp32.pth')
    path = CONFIG if config == 'trt' else CONFIG.with_name('qat_plaincnn_digits_ort_int8.py')
    spec = importlib.util.spec_from_file_location('train_tool', REPO / 'tools' / 'train.py')
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    code = train.main([
        str(path), '--work-dir', str(tmp_path / 'run'), '--cfg-options',
        f'model.checkpoint={tmp_path / "fp32.pth"}', 'train_cfg.max_epochs=1',
        'model.quantization.calib_steps=2'])
    assert code == 0
    onnx_path = tmp_path / 'run' / 'qat_int8.onnx'
    assert onnx_path.is_file()
    model = QAT(Config.fromfile(path).model.architecture, [torch.randn(2, 3, 16, 16)],
                dict(calib_steps=1, platform='ORT_INT8' if config == 'ort' else 'TRT_INT8'))
    state = torch.load(tmp_path / 'run' / 'epoch_1.pth')['state_dict']
    model.load_state_dict(state)
    images = torch.randn(8, 3, 16, 16)
    with torch.no_grad():
        ours = QuantExecutor(model.calibrated_graph())(images)[0]
    assert (ort_run(onnx_path, images) - ours).abs().max() < 0.05 * ours.abs().max()


def test_the_qat_algorithm_examples_run():
    from doctest_helpers import assert_examples_pass
    assert_examples_pass('razorlib.algorithms.qat')
