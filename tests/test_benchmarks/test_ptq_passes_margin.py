"""benchmarks/ptq_passes.py's margin interval: the SNR difference of two quantized outputs
over resamplings of the scored images."""
import math

import pytest
import torch
from benchmark_scripts import load_ptq_passes


@pytest.fixture
def ptq_passes(monkeypatch):
    return load_ptq_passes(monkeypatch)


def test_the_interval_brackets_the_margin_and_narrows_with_more_images(ptq_passes):
    torch.manual_seed(0)
    widths = []
    for images in (90, 1440):
        fp32 = torch.randn(images, 10)
        ours = fp32 + 0.01 * torch.randn(images, 10)
        theirs = fp32 + 0.02 * torch.randn(images, 10)  # twice the noise: 6.02 dB behind
        low, high = ptq_passes.margin_interval(fp32, ours, theirs)
        assert low < 20 * math.log10(2) < high
        widths.append(high - low)
    assert widths[1] < widths[0] / 2  # 16 times the images: about a quarter of the width
    same = torch.randn(50, 10)
    assert ptq_passes.margin_interval(same, same + 0.1, same + 0.1) == pytest.approx([0.0, 0.0])


def _scores(top1, agree=100.0, snr=40.0):
    return dict(top1=top1, agree=agree, snr=snr)


def test_the_tables_have_one_column_per_qat_row_trained(ptq_passes):
    """One QAT+KD row per ``--qat-kd-losses``: the tables take the QAT rows the results
    hold, 'QAT+KD' (the KL) absent where only ``mse`` was trained; no rows, no crash."""
    assert [ptq_passes.qat_row(loss) for loss in ('kl', 'mse')] == ['QAT+KD', 'QAT+KD mse']
    ort = ptq_passes.base.ort_label('MinMax', False)
    row = {'FP32': _scores(98.0), ort: _scores(97.5, snr=30.0),
           'baseline': _scores(97.0), 'passes': dict(_scores(97.5), margin_interval=[1, 2]),
           '+ mixed': dict(_scores(97.5), float=0, target=33.5),
           'QAT': _scores(98.0, snr=35.0), 'QAT+KD mse': _scores(97.0, snr=41.25)}
    text = ptq_passes.tables({'net': row}, ['MinMax'], 3.5)
    snr_header, _, snr_row, _, top1_header, _, top1_row = text.split('\n')[:7]
    assert snr_header.endswith('| QAT SNR dB | QAT+KD mse SNR dB |')
    assert snr_row.endswith('| 35.00 | 41.25 |') and 'QAT+KD SNR' not in snr_header
    assert top1_header.endswith('| QAT - FP32 | QAT+KD mse - FP32 |')
    assert top1_row.endswith('| 98.00 / 100.00 | 97.00 / 100.00 | +0.00 | -1.00 |')
    assert ptq_passes.tables({}, ['MinMax'], 3.5).startswith('| model | best ORT SNR dB |')
