"""benchmarks/prune_quality.py's verdict: each method's pick by validation KL, the issue's
*holds*, and the differences with their standard errors over the fine-tuning seeds."""
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / 'benchmarks' / 'prune_quality.py'


@pytest.fixture(scope='module')
def bench():
    path, before = list(sys.path), set(sys.modules)
    spec = importlib.util.spec_from_file_location('prune_quality_benchmark', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:  # the script prepends benchmarks/ and imports pooling.py from there
        sys.path[:] = path
        if 'pooling' not in before:
            sys.modules.pop('pooling', None)
    return module


def fine_tuned(top1s, kls, val_kl):
    runs = [dict(top1=t, kl=k) for t, k in zip(top1s, kls)]
    return dict(top1=sum(top1s) / len(top1s), kl=sum(kls) / len(kls), runs=runs,
                val=dict(top1=97.0, kl=val_kl))


def row(method, kd, ce):
    return dict(method=method, target=0.5, flops=0.5, pruned=dict(top1=90.0, kl=1.0),
                kd=kd, ce=ce)


def test_the_verdict_picks_by_validation_kl_and_weighs_the_seeds(bench):
    ours = row('razorlib l1 greedy',
               kd=fine_tuned([97.0, 97.2, 97.4], [0.010, 0.012, 0.014], val_kl=0.011),
               ce=fine_tuned([99.0, 99.0, 99.0], [0.001, 0.001, 0.001], val_kl=0.050))
    close = row('peer close', kd=fine_tuned([97.3, 97.3, 97.3], [0.020, 0.020, 0.020], 0.02),
                ce=fine_tuned([90.0, 90.0, 90.0], [0.5, 0.5, 0.5], 0.9))
    ahead = row('peer ahead', kd=fine_tuned([98.0, 98.0, 98.0], [0.020, 0.020, 0.020], 0.02),
                ce=fine_tuned([90.0, 90.0, 90.0], [0.5, 0.5, 0.5], 0.9))
    pick = bench.selected([ours])
    assert (pick.method, pick.loss, pick.top1s) == ('l1 greedy', 'KD', [97.0, 97.2, 97.4])
    lines = bench.report(dict(rows=[ours, close, ahead])).splitlines()
    verdict = {line.split(' | ')[5]: line.split(' | ')[10:] for line in lines
               if line.startswith('| 0.5 | l1 greedy KD')}
    # 97.2 against 97.3: behind, so the verdict fails, but by 0.1 with a standard
    # error of 0.115 (the peer's seeds agree): within 2 SE.  Against 98.0, 6.9 SE behind.
    assert verdict['peer close'] == ['no', '-0.10 ± 0.12', '-0.0080 ± 0.0012', 'yes |']
    assert verdict['peer ahead'] == ['no', '-0.80 ± 0.12', '-0.0080 ± 0.0012', 'no |']


def test_a_named_criterion_prunes_with_the_config_it_stands_for(bench, monkeypatch):
    """``--criteria l2_filters`` is ``dict(type='l2', norm_scales=False)``; a registered
    name goes to razorlib.prune as it is."""
    import torch.nn as nn
    calls = []

    def prune(model, x, **options):
        calls.append(options['importance'])
        return model
    monkeypatch.setattr(bench.razorlib, 'prune', prune)
    for criterion in ('l2_filters', 'l1'):
        bench.razorlib_prune(nn.Linear(2, 2), None, 0.5, criterion, 'local', [])
    assert calls == [dict(type='l2', norm_scales=False), 'l1']
    assert 'l2_filters' in bench.CRITERIA


def test_max_ratio_reaches_razorlib_prune_and_names_the_rows(bench, monkeypatch):
    """``--max-ratio 0.8`` caps every razorlib row (razorlib.prune's ``max_ratio``) and says
    so in its name; the peers' rows are not razorlib's and keep theirs."""
    import torch.nn as nn
    calls = []

    def prune(model, x, **options):
        calls.append(options['max_ratio'])
        return model
    monkeypatch.setattr(bench.razorlib, 'prune', prune)
    for cap, suffix in ((0.8, ' max_ratio=0.8'), (None, '')):
        args = bench.parse_args(['--criteria', 'l1', '--allocations', 'global', '--peers',
                                 'tp_magnitude'] + (['--max-ratio', str(cap)] if cap else []))
        (name, run), (peer, _) = bench.methods(args)
        assert (name, peer) == ('razorlib l1 global' + suffix, 'torch-pruning magnitude global')
        run(nn.Linear(2, 2), None, 0.5, None, dict(train=[]), None, None, None)
    assert calls == [0.8, None]


def with_images(result, val_kl, test_top1, test_kl):
    """``result`` (:func:`fine_tuned`) with per-image values: the validation KL and the
    test top-1 and KL of each of 400 images."""
    return dict(result, images=dict(val=dict(top1=[100.0] * 400, kl=val_kl),
                                    test=dict(top1=test_top1, kl=test_kl)))


def test_the_image_intervals_say_when_the_pick_is_a_draw_of_the_images(bench):
    """The pick margin is razorlib's pick minus its runner-up in validation KL, resampled
    over the images: two rows that differ on 2 images of 400 reach 0; against a peer that
    is behind on every image, the test intervals exclude it."""
    seeds = dict(top1s=[97.0, 97.0], kls=[0.01, 0.01])
    low, high = [0.01] * 400, [0.01] * 398 + [0.02, 0.02]

    def variant(val_kl, top1, kl):
        return with_images(fine_tuned(seeds['top1s'], seeds['kls'], sum(val_kl) / 400),
                           val_kl, top1, kl)
    pick = row('razorlib l1 global', kd=variant(low, [100.0] * 400, [0.01] * 400),
               ce=variant([0.5] * 400, [0.0] * 400, [1.0] * 400))
    runner_up = row('razorlib l1 sensitivity', kd=variant(high, [100.0] * 400, [0.01] * 400),
                    ce=variant([0.5] * 400, [0.0] * 400, [1.0] * 400))
    peer = row('peer', kd=variant(low, [50.0] * 400, [0.03] * 400),
               ce=variant([0.5] * 400, [0.0] * 400, [1.0] * 400))
    lines = bench.image_report([pick, runner_up, peer])
    assert lines[-1].startswith('| 0.5 | l1 global KD | l1 sensitivity KD | [-0.0001, +0.0000] '
                                '| peer KD | [+50.00, +50.00] | [-0.0200, -0.0200] |')
    assert 'The images as a source of error' in '\n'.join(bench.report(
        dict(rows=[pick, runner_up, peer])).splitlines()[-5:])
    # results of runs before 14 have no per-image values: the report says nothing of them
    plain = row('razorlib l1 global', kd=fine_tuned([97.0], [0.01], 0.01),
                ce=fine_tuned([97.0], [0.01], 0.02))
    assert bench.image_report([plain, row('peer', kd=plain['kd'], ce=plain['ce'])]) == []


def test_the_docstring_examples_hold(bench):
    import doctest
    result = doctest.testmod(bench)
    assert result.attempted >= 2 and result.failed == 0  # difference, image_interval


def test_each_images_figures_are_kept_and_average_to_the_rows(bench, monkeypatch):
    """``evaluate_method`` keeps each image's figures, the mean over the fine-tuning
    seeds, whose mean over the images is the row's (each seed's model differs here)."""
    import argparse

    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    images, labels = torch.randn(12, 3, 4, 4), torch.arange(12) % 3
    splits = dict(train=(images, labels), val=(images[:6], labels[:6]),
                  test=(images[6:], labels[6:]))
    dense = nn.Sequential(nn.Flatten(), nn.Linear(48, 3)).eval()

    def train(model, data, epochs, lr, seed, teacher=None):  # a different model per seed
        torch.manual_seed(seed)
        model[1].weight.data.add_(torch.randn_like(model[1].weight))
        return model
    monkeypatch.setattr(bench, 'train', train)
    dense_logits = {s: bench.logits_of(dense, splits[s][0]) for s in ('val', 'test')}
    args = argparse.Namespace(seed=0, ft_seeds=3, ft_epochs=1)
    row = bench.evaluate_method('m', dense, dense, args, splits, dense_logits,
                                images[:1], 1, 0.0)
    for loss in ('ce', 'kd'):
        kept = row[loss]['images']
        assert len(kept['test']['kl']) == 6 and len(kept['val']['top1']) == 6
        assert sum(kept['test']['kl']) / 6 == pytest.approx(row[loss]['kl'], abs=1e-5)
        assert sum(kept['test']['top1']) / 6 == pytest.approx(row[loss]['top1'], abs=1e-4)
        assert sum(kept['val']['kl']) / 6 == pytest.approx(row[loss]['val']['kl'], abs=1e-5)
        assert len({run['kl'] for run in row[loss]['runs']}) == 3  # three models


def test_the_pooled_verdict_weighs_the_dense_models_not_their_seeds(bench):
    """Two runs (dense models): razorlib level with the peer on top-1 in one and 0.4
    behind in the other, each run's seeds in perfect agreement.  Pooled, -0.20 with a
    standard error of 0.20 over the two runs: the verdict on the means fails, within 2
    SE, and it held in one run of two.  A peer missing from a run is pooled over the
    runs that have it."""
    def run(peer_top1, extra=()):
        rows = [row('razorlib l1 sensitivity',
                    kd=fine_tuned([97.0, 97.0], [0.010, 0.010], val_kl=0.01),
                    ce=fine_tuned([96.0, 96.0], [0.050, 0.050], val_kl=0.05)),
                row('peer', kd=fine_tuned([peer_top1] * 2, [0.012, 0.012], 0.012),
                    ce=fine_tuned([96.0, 96.0], [0.050, 0.050], 0.05))]
        return dict(rows=rows + [row(name, kd=fine_tuned([95.0] * 2, [0.02] * 2, 0.02),
                                     ce=fine_tuned([95.0] * 2, [0.02] * 2, 0.02))
                                 for name in extra])
    runs = [run(97.0, extra=['only here']), run(97.4)]
    by_peer = {p['peer']: p for p in bench.pooled(runs)}
    assert [round(v, 6) for v in by_peer['peer']['top1']] == [-0.2, 0.2]
    assert [round(v, 6) for v in by_peer['peer']['kl']] == [-0.002, 0.0]
    assert len(by_peer['only here']['runs']) == 1
    lines = bench.pooled_report(runs).splitlines()
    assert '| 0.5 | peer | 2 | -0.20 ± 0.20 | -0.0020 ± 0.0000 | no | yes | 1 of 2 |' in lines


def test_pool_refuses_a_run_it_cannot_pick_from_naming_the_file(bench, tmp_path):
    (tmp_path / 'old').mkdir()
    old = row('razorlib l1 local', kd=fine_tuned([97.0], [0.01], 0.01),
              ce=fine_tuned([97.0], [0.01], 0.01))
    del old['kd']['val']
    (tmp_path / 'old' / 'results.json').write_text(bench.json.dumps(dict(rows=[old])))
    for folder, message in (('old', 'has no validation figures'), ('missing', 'not found')):
        with pytest.raises(SystemExit, match=message) as refused:
            bench.main(['--pool', str(tmp_path / folder)])
        assert str(tmp_path / folder / 'results.json') in str(refused.value)
