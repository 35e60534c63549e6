"""int8_session: onnxruntime runs an exported QDQ model as razorlib computes it, choosing
unfused kernels on the CPUs whose fused int8 kernels saturate."""
import pytest
import torch

from ptq_helpers import STEPS, batches, calibrated, float_graph, worst_steps
from razorlib.quantization import QuantExecutor, export_graph, int8_session
from razorlib.quantization.export import ort_session
from razorlib.quantization.export.ort_session import int8_kernels_saturate, optimization_level


def cpuinfo(tmp_path, flags):
    path = tmp_path / 'cpuinfo'
    path.write_text(f'processor\t: 0\nmodel name\t: some CPU\nflags\t\t: {flags}\n\n')
    return str(path)


@pytest.mark.parametrize('flags, saturates', [
    ('fpu sse2 avx avx2 fma', True),                       # AVX2 without VNNI (AMD EPYC Zen 2)
    ('fpu sse2 avx avx2 avx512f avx512_vnni', False),      # AVX-512 VNNI
    ('fpu sse2 avx avx2 avx_vnni', False),                 # AVX-VNNI (Alder Lake)
    ('fpu sse2 avx', False),                               # no AVX2: not the u8 x s8 path
])
def test_the_cpu_flags_decide_whether_int8_kernels_saturate(tmp_path, flags, saturates):
    assert int8_kernels_saturate(cpuinfo(tmp_path, flags)) is saturates


def test_an_unreadable_cpuinfo_is_not_taken_for_a_saturating_cpu(tmp_path):
    assert int8_kernels_saturate(str(tmp_path / 'missing')) is False


def test_the_default_level_follows_the_cpu(monkeypatch):
    assert optimization_level(True) == 'all' and optimization_level(False) == 'none'
    monkeypatch.setattr(ort_session, 'int8_kernels_saturate', lambda: True)
    assert optimization_level() == 'basic'
    monkeypatch.setattr(ort_session, 'int8_kernels_saturate', lambda: False)
    assert optimization_level() == 'all'


def test_the_default_session_computes_the_exported_model_on_this_cpu(tmp_path):
    graph = calibrated(float_graph(), 'ORT_INT8')
    export_graph(graph, tmp_path / 'net.onnx', 'QDQ_ONNX')
    session = int8_session(tmp_path / 'net.onnx')
    inputs = batches(2, seed=3)
    for x in inputs:
        ours = QuantExecutor(graph)(x)
        feeds = {session.get_inputs()[0].name: x.numpy()}
        theirs = [torch.from_numpy(array) for array in session.run(None, feeds)]
        assert worst_steps(graph, ours, theirs) <= STEPS
