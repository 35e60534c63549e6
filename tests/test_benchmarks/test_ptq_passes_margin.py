"""benchmarks/ptq_passes.py's margin interval: the SNR difference of two quantized outputs
over resamplings of the scored images."""
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / 'benchmarks' / 'ptq_passes.py'


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.setattr(sys, 'path', list(sys.path))  # the script prepends benchmarks/
    before = set(sys.modules)
    spec = importlib.util.spec_from_file_location('ptq_passes_benchmark', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        if 'ptq_vs_ort' not in before:
            sys.modules.pop('ptq_vs_ort', None)
    return module


def test_the_interval_brackets_the_margin_and_narrows_with_more_images(bench):
    torch.manual_seed(0)
    widths = []
    for images in (90, 1440):
        fp32 = torch.randn(images, 10)
        ours = fp32 + 0.01 * torch.randn(images, 10)
        theirs = fp32 + 0.02 * torch.randn(images, 10)  # twice the noise: 6.02 dB behind
        low, high = bench.margin_interval(fp32, ours, theirs)
        assert low < 20 * math.log10(2) < high
        widths.append(high - low)
    assert widths[1] < widths[0] / 2  # 16 times the images: about a quarter of the width
    same = torch.randn(50, 10)
    assert bench.margin_interval(same, same + 0.1, same + 0.1) == pytest.approx([0.0, 0.0])
