"""tools/deploy.py and benchmarks/gpu_latency.py: one line and exit 0 without TensorRT or a
GPU; the graph deploy builds is the one tools/ptq.py exports, flags a QAT config cannot take
are refused; the engine checks where TensorRT and a GPU are present."""
import importlib.util
import json

import onnxruntime as ort
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from conftest import REPO, TINY, LogCapture, load_tool
from razorlib.quantization import export_graph
from razorlib.registry import MODELS

HAS_TENSORRT = importlib.util.find_spec('tensorrt') is not None
CAN_BUILD = HAS_TENSORRT and torch.cuda.is_available()
PTQ_CONFIG = REPO / 'configs' / 'quantization' / 'ptq' / 'autoslim_plaincnn_digits_trt_int8.py'
QAT_CONFIG = REPO / 'configs' / 'quantization' / 'qat' / 'qat_plaincnn_digits_trt_int8.py'


@pytest.mark.skipif(CAN_BUILD, reason='TensorRT and a GPU are present: the tool builds engines')
def test_without_tensorrt_or_a_gpu_the_tool_says_so_in_one_line(capsys, tmp_path):
    deploy = load_tool('deploy')
    (tmp_path / 'model.pth').write_bytes(b'')  # the arguments are checked first
    assert deploy.main([str(PTQ_CONFIG), str(tmp_path / 'model.pth')]) == \
        deploy.NOT_AVAILABLE == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and 'no engine built' in out[0]
    assert ('TensorRT is not installed' in out[0]) != HAS_TENSORRT


def test_the_gpu_benchmark_skips_cleanly_without_a_gpu(run_python):
    if torch.cuda.is_available():
        pytest.skip('a CUDA GPU is present: the benchmark measures, which takes minutes')
    result = run_python('benchmarks/gpu_latency.py', timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == ('benchmarks/gpu_latency.py: no CUDA GPU on this machine; '
                                     'nothing measured')


@pytest.mark.skipif(not CAN_BUILD, reason=str(load_tool('deploy').unavailable()))
def test_int8_and_fp16_engines_match_the_simulation(tiny_supernet, tmp_path):
    deploy = load_tool('deploy')
    code = deploy.main([str(PTQ_CONFIG), str(tiny_supernet), '--work-dir', str(tmp_path),
                        '--cfg-options', 'ptq.calib_steps=2'])
    assert code == 0
    results = json.loads((tmp_path / 'deploy.json').read_text())['results']
    assert results['trt_int8']['snr_db'] > 25  # against razorlib's simulated INT8
    assert results['trt_fp16']['snr_db'] > 40  # against FP32
    assert results['trt_int8']['agreement'] > 97


@pytest.mark.parametrize('flags', [['--subnet', 'half.yaml'], ['--recalibrate-bn', '4'],
                                   ['--subnet', 'half.yaml', '--recalibrate-bn', '0']])
def test_a_qat_config_refuses_what_its_checkpoint_fixes(flags, tmp_path, monkeypatch):
    deploy = load_tool('deploy')
    log = LogCapture(deploy, monkeypatch)
    code = deploy.main([str(QAT_CONFIG), 'epoch_5.pth', *flags, '--work-dir', str(tmp_path)])
    assert code == 2
    given = ' and '.join(flag for flag in flags if flag.startswith('--'))
    assert log.messages == [f'{QAT_CONFIG}: {given}: a QAT checkpoint already holds its '
                            "trained INT8 graph (the widths of the config's model.architecture,"
                            ' batch norms folded); slice and recalibrate the model before QAT '
                            'training instead']
    assert not list(tmp_path.iterdir())


def test_a_ptq_config_takes_a_subnet():
    deploy = load_tool('deploy')
    args = deploy.parse_args([str(PTQ_CONFIG), 'model.pth', '--subnet', 'half.yaml'])
    assert deploy.qat_refusal(args, Config.fromfile(str(PTQ_CONFIG))) is None


ORT_TO_TRT = ('TensorRT builds its INT8 engine from a TRT_INT8 graph (symmetric int8 Q/DQ '
              'pairs, zero points 0), not from one quantized for ORT_INT8; ')


@pytest.mark.parametrize('config, options, message', [
    (PTQ_CONFIG.with_name('autoslim_plaincnn_digits_ort_int8_kl.py'), [],
     f'ptq.platform ORT_INT8: {ORT_TO_TRT}quantize for TRT_INT8 (--cfg-options '
     'ptq.platform=TRT_INT8), or run the ORT_INT8 QDQ model on onnxruntime'),
    (PTQ_CONFIG, ['--cfg-options', 'ptq.platform=ort_int8'], 'ptq.platform ORT_INT8: '),
    (QAT_CONFIG.with_name('qat_plaincnn_digits_ort_int8.py'), [],
     f'model.quantization.platform ORT_INT8: {ORT_TO_TRT}train QAT for TRT_INT8, or run the '
     'ORT_INT8 QDQ model on onnxruntime')])
def test_a_graph_for_another_platform_is_refused_on_any_machine(config, options, message,
                                                                tmp_path, monkeypatch):
    """An ORT_INT8 graph (uint8 activations with zero points) is no TensorRT INT8 model:
    refused before TensorRT is looked for, rather than calibrated and handed to it."""
    deploy = load_tool('deploy')
    (tmp_path / 'model.pth').write_bytes(b'')
    monkeypatch.setattr(deploy, 'unavailable', lambda: pytest.fail('TensorRT looked for'))
    log = LogCapture(deploy, monkeypatch)
    work_dir = tmp_path / 'deploy'
    assert deploy.main([str(config), str(tmp_path / 'model.pth'), '--work-dir', str(work_dir),
                        *options]) == 2
    assert len(log.messages) == 1 and log.messages[0].startswith(f'{config}: {message}')
    assert not work_dir.exists()


@pytest.mark.parametrize('config', [PTQ_CONFIG, QAT_CONFIG, TINY])  # TINY: ptq's defaults
def test_a_trt_int8_graph_is_deployed(config):
    deploy = load_tool('deploy')
    assert deploy.platform_refusal(Config.fromfile(str(config))) is None


def outputs(path, images: torch.Tensor) -> torch.Tensor:
    """The first output of the ONNX model at ``path`` in onnxruntime."""
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name:
                                               images.numpy()})[0])


def test_a_subnet_graph_is_ptqs_batch_norms_recalibrated(tiny_supernet, tmp_path):
    init_default_scope('razorlib')
    supernet = MODELS.build(Config.fromfile(TINY).model)
    supernet.set_min_subnet()
    supernet.export_subnet().dump(tmp_path / 'min.yaml')
    common = [str(TINY), str(tiny_supernet), '--subnet', str(tmp_path / 'min.yaml'),
              '--cfg-options', 'ptq.calib_steps=2']
    assert load_tool('ptq').main([*common, '--analyse-steps', '1', '--work-dir',
                                  str(tmp_path / 'ptq')]) == 0
    assert 'batch-norm statistics from 2 batches' in (tmp_path / 'ptq' / 'ptq.log').read_text()
    deploy = load_tool('deploy')
    images = torch.randn(5, 3, 16, 16)  # the digits upscaled
    expected = outputs(tmp_path / 'ptq' / f'{TINY.stem}_int8.onnx', images)
    results = {}
    for steps in ('default', '0'):
        flags = [] if steps == 'default' else ['--recalibrate-bn', steps]
        torch.manual_seed(0)  # as both tools' main() do: the augmentations draw from it
        graph, _, _ = deploy.quantized_graph(deploy.parse_args([*common, *flags]))
        path = tmp_path / f'deploy_{steps}.onnx'
        export_graph(graph, path, 'QDQ_ONNX')
        results[steps] = outputs(path, images)
    assert torch.equal(results['default'], expected)
    assert not torch.allclose(results['0'], expected, atol=1e-2)  # the full width's statistics


def test_an_earlier_run_is_refused_without_overwrite_on_any_machine(tmp_path, monkeypatch):
    deploy = load_tool('deploy')
    (tmp_path / 'model.pth').write_bytes(b'')
    work_dir = tmp_path / 'deploy'
    work_dir.mkdir()
    (work_dir / 'deploy.json').write_text('{"results": "earlier"}')
    (work_dir / f'{PTQ_CONFIG.stem}_int8.engine').write_bytes(b'plan')
    log = LogCapture(deploy, monkeypatch)
    argv = [str(PTQ_CONFIG), str(tmp_path / 'model.pth'), '--work-dir', str(work_dir)]
    assert deploy.main(argv) == 2
    assert log.messages == [f'{work_dir}: holds the deploy.json and {PTQ_CONFIG.stem}_int8.engine'
                            ' of an earlier run; pass --overwrite to replace them, or choose '
                            'another --work-dir']
    assert (work_dir / 'deploy.json').read_text() == '{"results": "earlier"}'
    if not CAN_BUILD:  # with --overwrite the run goes on, to the line saying no engine is built
        assert deploy.main([*argv, '--overwrite']) == deploy.NOT_AVAILABLE
        assert (work_dir / 'deploy.json').read_text() == '{"results": "earlier"}'


def test_overwrite_leaves_no_earlier_figures_beside_the_new_models(tiny_supernet, tmp_path,
                                                                   monkeypatch):
    """An engine that fails to build after the new ONNX models are written: the earlier
    run's deploy.json and engines, which describe other models, are gone."""
    deploy = load_tool('deploy')
    work_dir = tmp_path / 'deploy'
    work_dir.mkdir()
    earlier = [work_dir / 'deploy.json', work_dir / f'{TINY.stem}_fp32.engine']
    for path in earlier:
        path.write_text('earlier')

    def engine_fails(path, *args):
        raise RuntimeError(f'TensorRT failed to build an engine from {path}')

    monkeypatch.setattr(deploy, 'unavailable', lambda: None)
    monkeypatch.setattr(deploy, 'Engine', engine_fails)
    with pytest.raises(RuntimeError, match='TensorRT failed to build'):
        deploy.main([str(TINY), str(tiny_supernet), '--work-dir', str(work_dir), '--overwrite',
                     '--cfg-options', 'ptq.calib_steps=2'])
    written = sorted(path.name for path in work_dir.iterdir())
    assert written == [f'{TINY.stem}_fp32.onnx', f'{TINY.stem}_int8.onnx']
