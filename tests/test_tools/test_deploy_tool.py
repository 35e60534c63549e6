"""tools/deploy.py and benchmarks/gpu_latency.py: one line and exit 0 without TensorRT or a
GPU; the engine checks where TensorRT and a GPU are present."""
import importlib.util
import json

import pytest
import torch

from conftest import REPO, load_tool

HAS_TENSORRT = importlib.util.find_spec('tensorrt') is not None
CAN_BUILD = HAS_TENSORRT and torch.cuda.is_available()
PTQ_CONFIG = REPO / 'configs' / 'quantization' / 'ptq' / 'autoslim_plaincnn_digits_trt_int8.py'


@pytest.mark.skipif(CAN_BUILD, reason='TensorRT and a GPU are present: the tool builds engines')
def test_without_tensorrt_or_a_gpu_the_tool_says_so_in_one_line(capsys):
    deploy = load_tool('deploy')
    assert deploy.main([str(PTQ_CONFIG), 'missing.pth']) == deploy.NOT_AVAILABLE == 0
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
