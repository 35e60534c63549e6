"""benchmarks/ptq_passes.py over several FP32 models: ``--seed`` and ``--out`` write one
run's figures, ``--pool`` gives each target's mean over the runs with its standard error
and refuses runs that differ in more than their FP32 models."""
import doctest
import json
from pathlib import Path

import pytest
import torch
from benchmark_scripts import load_ptq_passes


@pytest.fixture
def ptq_passes(monkeypatch):
    return load_ptq_passes(monkeypatch)


def model_figures(passes, best_ort, fp32, qat, qat_kd):
    return {'FP32': dict(top1=fp32, agree=100.0, snr=float('inf')),
            'ORT MinMax': dict(top1=fp32, agree=100.0, snr=best_ort),
            'ORT Entropy': dict(top1=fp32, agree=100.0, snr=best_ort - 1.0),
            'passes': dict(top1=fp32, agree=100.0, snr=passes),
            'QAT': dict(top1=qat, agree=100.0, snr=30.0),
            'QAT+KD': dict(top1=qat_kd, agree=100.0, snr=30.0)}


def write_run(folder: Path, seed: int, rows: dict, **changes) -> str:
    run = dict(rows=rows, seed=seed, score_split='test', scored=360, platform='TRT_INT8',
               passes=['AdaRound'], test_ratio=0.2, ort=['ORT MinMax', 'ORT Entropy'],
               torch='2.13.0', onnxruntime='1.32.0')
    run.update(changes)
    path = folder / f'seed_{seed}.json'
    path.write_text(json.dumps(run))
    return str(path)


def test_the_pool_averages_each_target_over_the_runs(ptq_passes, tmp_path, capsys):
    one = 100 / 360  # one scored image, in top-1 points
    first = write_run(tmp_path, 1, {'CNN': model_figures(30.0, 26.0, 90.0, 90.0, 90.0),
                                    'MobileNet': model_figures(28.0, 26.0, 85.0, 85.0 - one,
                                                               85.0 + one)})
    second = write_run(tmp_path, 2, {'CNN': model_figures(31.0, 27.0, 90.0, 90.0 + one, 90.0),
                                     'MobileNet': model_figures(30.0, 26.0, 85.0, 85.0,
                                                                85.0 - one)})
    ptq_passes.main(['--pool', first, second])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith('Pooled over 2 runs (seeds 1, 2; FP32 models)')
    rows = {tuple(cell.strip() for cell in line.strip('|').split('|')[:2]): line
            for line in lines if line.startswith('| ') and ' - ' in line}
    # the margin is over the best of onnxruntime's methods: 4.0 and 4.0 dB
    assert rows['CNN', 'passes - best ORT dB'].endswith(
        '| 2 | +4.00 ± 0.00 | +3 | yes | yes | 2 of 2 |')
    # 2.0 and 4.0 dB: a mean of 3.0 holds; one of the two runs misses
    assert rows['MobileNet', 'passes - best ORT dB'].endswith(
        '| 2 | +3.00 ± 1.00 | +3 | yes | yes | 1 of 2 |')
    # one image lost, then none: -0.14 ± 0.14 misses -0.1, within two SE it holds
    assert rows['MobileNet', 'QAT - FP32'].endswith(
        '| 2 | -0.14 ± 0.14 | -0.1 | no | yes | 1 of 2 |')
    assert rows['CNN', 'QAT - FP32'].endswith('| +0.14 ± 0.14 | -0.1 | yes | yes | 2 of 2 |')
    assert rows['MobileNet', 'QAT+KD - FP32'].endswith(
        '| +0.00 ± 0.28 | -0.1 | yes | yes | 1 of 2 |')
    assert len(rows) == 6


def test_a_run_that_is_no_record_or_differs_beyond_its_fp32_models_is_refused(
        ptq_passes, tmp_path):
    rows = {'CNN': model_figures(30.0, 26.0, 90.0, 90.0, 90.0)}
    first = write_run(tmp_path, 1, rows)
    with pytest.raises(SystemExit, match='cannot read .*missing.json'):
        ptq_passes.main(['--pool', first, str(tmp_path / 'missing.json')])
    (tmp_path / 'table.json').write_text(json.dumps({'CNN': {}}))
    with pytest.raises(SystemExit, match=r"table.json is no run written by --out \(no 'rows'\)"):
        ptq_passes.main(['--pool', first, str(tmp_path / 'table.json')])
    val = write_run(tmp_path, 2, rows, score_split='val')
    with pytest.raises(SystemExit, match="seed_2.json differs from the first run in "
                       "'score_split' \\('val' against 'test'\\)"):
        ptq_passes.main(['--pool', first, val])
    recipe = dict(observer='mse', adaround_steps=500)
    first = write_run(tmp_path, 1, rows, options=recipe)
    kl = write_run(tmp_path, 3, rows, options=dict(recipe, observer='kl'))
    with pytest.raises(SystemExit, match="seed_3.json differs from the first run in "
                       "'options'"):
        ptq_passes.main(['--pool', first, kl])


def test_seed_trains_the_fp32_models_and_out_writes_the_run(
        ptq_passes, tmp_path, monkeypatch, capsys):
    seeds = []

    def train(model, images, labels, epochs, lr):
        seeds.append(torch.initial_seed())
        return model

    figures = model_figures(30.0, 26.0, 90.0, 90.0, 90.0)
    figures['+ mixed'] = dict(figures['passes'], float=0, target=29.5)
    figures['passes']['margin_interval'] = [3.5, 4.5]
    figures['baseline'] = figures['passes']
    monkeypatch.setattr(ptq_passes.base, 'train', train)
    monkeypatch.setattr(ptq_passes, 'compare', lambda *args: figures)
    out = tmp_path / 'runs' / 'seed_7.json'
    ptq_passes.main(['--models', 'MobileNetV2 x0.5', '--seed', '7', '--out', str(out),
                     '--ort-methods', 'MinMax', 'Entropy'])
    assert seeds == [7]
    assert 'FP32 seed 7' in capsys.readouterr().out
    run = json.loads(out.read_text())
    assert run['seed'] == 7 and run['rows'] == {'MobileNetV2 x0.5': figures}
    assert (run['score_split'], run['scored'], run['ort']) == (
        'test', 360, ['ORT MinMax', 'ORT Entropy'])
    assert run['options']['observer'] == 'mse' and 'seed' not in run['options']
    assert ptq_passes.pool_member(str(out))['rows'] == run['rows']


def test_the_docstring_examples_hold(ptq_passes):
    assert doctest.testmod(ptq_passes).failed == 0
