"""tools/prune.py: a built-in model, or a trained supernet sliced to a subnet file."""
import json
import random
import re
import subprocess
import sys

import pytest

import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.runner import Runner
from torch.utils.data import Dataset

from conftest import REPO, TINY, LogCapture, load_tool
from razorlib.datasets import DigitsDataset
from razorlib.engine.loops import recalibrate_bn
from razorlib.models import PlainCNN
from razorlib.pruning import slim_model
from razorlib.registry import DATASETS, IMPORTANCES, MODELS


@DATASETS.register_module(force=True)
class UnlabelledDigits(Dataset):
    """The digits train split's images without their labels, as an unlabelled calibration
    set gives them (``{'inputs': ...}`` only); none of them with ``empty=True``."""

    def __init__(self, empty: bool = False):
        self.digits = DigitsDataset(split='train', test_ratio=0.2)
        self.size = 0 if empty else len(self.digits)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict:
        return dict(inputs=self.digits[index]['inputs'])


def data_config(path, dataset, shuffle=False):
    """``path``, written as a --data-config whose train_dataloader reads ``dataset`` (the
    config text of a dataset dict) in batches of 8."""
    path.write_text("train_dataloader = dict(batch_size=8, num_workers=0, "
                    "collate_fn=dict(type='default_collate'), "
                    f"sampler=dict(type='DefaultSampler', shuffle={shuffle}), "
                    f"dataset={dataset})\n")
    return path


def test_prune_tool_writes_a_config_and_weights_that_rebuild_the_slim_model(tmp_path):
    code = load_tool('prune').main(['--model', 'plain_cnn', '--ratio', '0.5',
                                    '--input-size', '16', '--work-dir', str(tmp_path)])
    assert code == 0
    assert (tmp_path / 'prune.log').read_text().count('OK') == 2
    model = slim_model(PlainCNN(num_classes=10), tmp_path / 'channel_cfg.yaml')
    model.load_state_dict(torch.load(tmp_path / 'slim.pth'))
    assert sum(p.numel() for p in model.parameters()) < \
        sum(p.numel() for p in PlainCNN(num_classes=10).parameters())
    assert model(torch.randn(1, 3, 16, 16)).shape == (1, 10)


def build_supernet(checkpoint):
    cfg = Config.fromfile(TINY)
    init_default_scope('razorlib')
    supernet = MODELS.build(cfg.model)
    supernet.load_state_dict(torch.load(checkpoint)['state_dict'])
    return cfg, supernet.eval()


def sliced(tiny_supernet, tmp_path, *extra):
    """The supernet masked to a sampled subnet, and the slim model tools/prune.py wrote of
    it (with ``extra`` options), rebuilt from the plain architecture config: no AutoSlim,
    no pruner, no masks."""
    cfg, supernet = build_supernet(tiny_supernet)
    supernet.set_subnet(supernet.sample_subnet(random.Random(2)))
    supernet.export_subnet().dump(tmp_path / 'subnet.yaml')
    out = tmp_path / 'pruned'
    code = load_tool('prune').main([str(TINY), str(tiny_supernet), '--subnet',
                                    str(tmp_path / 'subnet.yaml'), '--work-dir', str(out),
                                    *extra])
    assert code == 0
    assert (out / 'prune.log').read_text().count('OK') == 2
    slim = slim_model(MODELS.build(cfg.model.architecture), out / 'channel_cfg.yaml').eval()
    slim.load_state_dict(torch.load(out / 'slim.pth'))
    return cfg, supernet, slim


def test_a_supernet_subnet_becomes_a_slim_model_without_the_supernet(tiny_supernet, tmp_path):
    _, supernet, slim = sliced(tiny_supernet, tmp_path, '--recalib-batches', '0')
    assert not any('mask' in name for name in slim.state_dict())
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():  # the supernet's batch-norm statistics kept: the same outputs
        assert torch.allclose(slim(x), supernet.architecture(x), atol=1e-5)
    assert slim.backbone.stages[1].conv.out_channels < 16


def test_the_slim_model_gets_the_batch_norms_the_search_recalibrates_the_subnet_with(
        tiny_supernet, tmp_path):
    """The supernet's shared statistics fit no subnet; the search scores each one after
    recalibrating them on training batches, and the slim model gets the same."""
    cfg, supernet, slim = sliced(tiny_supernet, tmp_path, '--recalib-batches', '3')
    log = (tmp_path / 'pruned' / 'prune.log').read_text()
    assert 'batch norms of the slim model re-estimated on 3 batches' in log
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        shared = supernet.architecture(x)
        recalibrate_bn(supernet, Runner.build_dataloader(cfg.train_dataloader, seed=0), 3)
        assert not torch.allclose(slim(x), shared, atol=1e-3)
        assert torch.allclose(slim(x), supernet.architecture(x), atol=1e-4)


def test_a_bad_subnet_file_is_reported_with_its_key(tiny_supernet, tmp_path, monkeypatch):
    (tmp_path / 'subnet.yaml').write_text(
        'version: 1\nmodules:\n  backbone.stages.0.conv: {out_channels: 4}\n')
    tool = load_tool('prune')
    log = LogCapture(tool, monkeypatch)
    code = tool.main([str(TINY), str(tiny_supernet), '--subnet', str(tmp_path / 'subnet.yaml'),
                      '--work-dir', str(tmp_path / 'out')])
    assert code == 2
    assert "modules.backbone.stages.0.conv: missing key 'raw_out_channels'" in log.text
    assert not (tmp_path / 'out').exists()  # refused before anything is written


def test_config_mode_needs_a_checkpoint_and_a_subnet(tmp_path, monkeypatch):
    tool = load_tool('prune')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(TINY), '--work-dir', str(tmp_path / 'out')]) == 2
    assert 'needs CHECKPOINT and --subnet' in log.text
    assert not (tmp_path / 'out').exists()


def test_config_mode_refuses_a_pruning_algorithm(tiny_supernet, tmp_path, monkeypatch):
    tool = load_tool('prune')
    log = LogCapture(tool, monkeypatch)
    config = REPO / 'configs' / 'pruning' / 'ite_prune' / 'ite_prune_plaincnn_digits.py'
    subnet = tmp_path / 'slim.yaml'
    subnet.write_text('version: 1\nmodules: {}\n')
    assert tool.main([str(config), str(tiny_supernet), '--subnet', str(subnet),
                      '--work-dir', str(tmp_path / 'out')]) == 2
    assert 'model: CONFIG mode slices an AutoSlim supernet to a searched subnet, got ' \
        'ItePruneAlgorithm' in log.text
    assert not (tmp_path / 'out').exists()


def kept_counts(log):
    """Group id -> (kept, channels) from the tool's 'kept channels per group' lines."""
    lines = log.split('kept channels per group:')[1].splitlines()[1:]
    counts = {}
    for line in lines:
        match = re.search(r' - INFO -   (\S+): (\d+)/(\d+)$', line)
        if match is None:
            break
        counts[match[1]] = (int(match[2]), int(match[3]))
    return counts


def ratio_row(log):
    """The params, FLOPs and latency ratios of the tool's cost table."""
    row = next(line for line in log.splitlines() if ' - INFO - ratio ' in line)
    return [float(v) for v in row.split(' - INFO - ratio ')[1].split()]


def test_a_flops_budget_with_a_data_criterion_ranked_globally(tmp_path):
    code = load_tool('prune').main(['--model', 'plain_cnn', '--input-size', '16', '--flops',
                                    '0.4', '--importance', 'taylor', '--global', '--round-to',
                                    '4', '--data-batches', '2', '--work-dir', str(tmp_path)])
    assert code == 0
    log = (tmp_path / 'prune.log').read_text()
    assert 'taylor channels, global) to flops 0.4; 2 data batches' in log
    counts = kept_counts(log)
    assert len(counts) == 3 and all(k % 4 == 0 or k == n for k, n in counts.values())
    params, flops, latency = ratio_row(log)
    assert flops <= 0.4 and params < 1 and latency > 0
    assert 'latency' in log and log.count('OK') == 2
    assert 'batch norms of the slim model re-estimated on 2 batches' in log
    slim = slim_model(PlainCNN(num_classes=10), tmp_path / 'channel_cfg.yaml')
    slim.load_state_dict(torch.load(tmp_path / 'slim.pth'))


def test_the_criterion_is_built_once(tmp_path, monkeypatch):
    """taylor reads data and its targets: what the run asks of it, and the pruner ranking
    by it, are one criterion built once from --importance."""
    built = []
    build = IMPORTANCES.build
    monkeypatch.setattr(IMPORTANCES, 'build', lambda cfg: built.append(cfg) or build(cfg))
    code = load_tool('prune').main(['--model', 'plain_cnn', '--input-size', '16', '--flops',
                                    '0.5', '--importance', 'taylor', '--data-batches', '1',
                                    '--work-dir', str(tmp_path)])
    assert code == 0
    assert built == [dict(type='taylor')]


@pytest.mark.parametrize('allocation', ['sensitivity', 'greedy'])
def test_a_flops_budget_allocated_by_measured_losses(tmp_path, allocation):
    code = load_tool('prune').main(['--model', 'plain_cnn', '--input-size', '16', '--flops',
                                    '0.5', f'--{allocation}', '--data-batches', '2',
                                    '--work-dir', str(tmp_path)])
    assert code == 0
    log = (tmp_path / 'prune.log').read_text()
    assert f'l1 channels, {allocation}) to flops 0.5; 2 data batches' in log
    params, flops, latency = ratio_row(log)
    assert flops <= 0.5 and log.count('OK') == 2
    counts = kept_counts(log)
    assert len(set(k / n for k, n in counts.values())) > 1  # not one ratio for every group


DIGITS = "dict(type='DigitsDataset', split='train', test_ratio=0.2)"


def test_the_data_config_gives_the_batches(tmp_path):
    config = data_config(tmp_path / 'data.py', DIGITS)
    code = load_tool('prune').main(['--model', 'plain_cnn', '--input-size', '16', '--ratio',
                                    '0.5', '--importance', 'activation', '--data-config',
                                    str(config), '--data-batches', '3', '--work-dir',
                                    str(tmp_path / 'out')])
    assert code == 0
    log = (tmp_path / 'out' / 'prune.log').read_text()
    assert '3 data batches' in log  # the 8x8 digits resized to the 16x16 input
    assert all(k == n // 2 for k, n in kept_counts(log).values())


@pytest.mark.slow  # two whole tools/prune.py runs
def test_the_seed_fixes_the_order_of_a_shuffling_data_config(tmp_path):
    # a shuffling sampler without a seed of its own takes --seed, so runs repeat
    config = data_config(tmp_path / 'data.py', DIGITS, shuffle=True)
    configs = []
    for run in range(2):  # two processes: an unseeded sampler draws a new seed in each
        subprocess.run([sys.executable, str(REPO / 'tools' / 'prune.py'), '--model',
                        'plain_cnn', '--input-size', '16', '--threads', '1', '--flops', '0.5',
                        '--importance', 'taylor', '--global', '--data-config', str(config),
                        '--data-batches', '2', '--seed', '3', '--work-dir',
                        str(tmp_path / f'{run}')], check=True, capture_output=True)
        configs.append((tmp_path / f'{run}' / 'channel_cfg.yaml').read_text())
    assert configs[0] == configs[1]


@pytest.mark.parametrize('importance', ['l1', 'activation', 'apoz'])
def test_criteria_reading_inputs_only_prune_on_unlabelled_data(tmp_path, importance):
    """l1 (with the batch norms re-estimated), activation and apoz never read the targets:
    the same images without labels give the same slim model."""
    results = []
    for name, dataset in (('labelled', DIGITS), ('unlabelled', "dict(type='UnlabelledDigits')")):
        config = data_config(tmp_path / f'{name}.py', dataset)
        out = tmp_path / name
        assert load_tool('prune').main(['--model', 'plain_cnn', '--input-size', '16', '--ratio',
                                        '0.5', '--importance', importance, '--data-config',
                                        str(config), '--data-batches', '2', '--threads', '1',
                                        '--work-dir', str(out)]) == 0
        assert 'batch norms of the slim model re-estimated on 2 batches' in \
            (out / 'prune.log').read_text()
        results.append(((out / 'channel_cfg.yaml').read_text(), torch.load(out / 'slim.pth')))
    (labelled_cfg, labelled), (unlabelled_cfg, unlabelled) = results
    assert unlabelled_cfg == labelled_cfg
    assert all(torch.equal(unlabelled[key], labelled[key]) for key in labelled)


@pytest.mark.parametrize('option, dataset, message', [  # message: a regular expression
    # a criterion or an allocation scoring channels by the loss needs the targets
    (['--importance', 'taylor'], "dict(type='UnlabelledDigits')",
     re.escape("train_dataloader batch 0 has no targets ('data_samples' with a gt_label "
               'each, or a label per image); --importance taylor scores channels by the '
               'loss, which needs them (l1, activation, apoz and wanda read the inputs '
               'only)') + '$'),
    (['--importance', 'fisher'], "dict(type='UnlabelledDigits')",
     'train_dataloader batch 0 has no targets .*; --importance fisher scores channels by '
     'the loss'),
    (['--sensitivity'], "dict(type='UnlabelledDigits')",
     'train_dataloader batch 0 has no targets .*; --sensitivity scores channels by the '
     'loss'),
    (['--importance', 'taylor'], "dict(type='DigitzDataset')",
     "train_dataloader.dataset.type: 'DigitzDataset' is not registered in the dataset "
     "registry"),
    (['--importance', 'activation'], "dict(type='UnlabelledDigits', empty=True)",
     'train_dataloader.dataset: UnlabelledDigits holds no samples'),
    (['--importance', 'l1'], "dict(type='UnlabelledDigits', emtpy=True)",
     "train_dataloader.dataset.emtpy: UnlabelledDigits takes no argument 'emtpy'"),
    (['--importance', 'l1'], "dict(type='DigitsDataset', split='tran')",
     "train_dataloader: ValueError: split must be one of .* got 'tran'"),
    (['--importance', 'taylor'], 'dict(', r"line 1: '\(' was never closed"),
], ids=['taylor-without-targets', 'fisher-without-targets', 'sensitivity-without-targets',
        'unknown-type', 'empty', 'unknown-argument', 'refused-value', 'syntax-error'])
def test_data_the_pruning_cannot_use_is_refused_before_the_work_dir_is_made(
        tmp_path, monkeypatch, option, dataset, message):
    config = data_config(tmp_path / 'data.py', dataset)
    tool = load_tool('prune')
    log = LogCapture(tool, monkeypatch)
    code = tool.main(['--model', 'plain_cnn', '--input-size', '16', *option, '--data-config',
                      str(config), '--work-dir', str(tmp_path / 'out')])
    assert code == 2 and len(log.messages) == 1 and '\n' not in log.text
    assert re.match(re.escape(f'--data-config {config}: ') + message, log.text), log.text
    assert not (tmp_path / 'out').exists()


# 64x64 inputs: at 16x16 the model's time is mostly call overhead, and on a busy machine
# its narrowest subnet measured 0.838 of the dense time, within the tolerance of 0.85, so
# the search ended without the per-layer table these tests read (at 64x64: 0.15)
def test_a_latency_budget_is_searched_on_the_runtime(tmp_path, monkeypatch):
    monkeypatch.setenv('RAZORLIB_CACHE_DIR', str(tmp_path / 'cache'))
    code = load_tool('prune').main(['--model', 'plain_cnn', '--input-size', '64', '--latency',
                                    '0.85', '--work-dir', str(tmp_path / 'out')])
    assert code == 0
    log = (tmp_path / 'out' / 'prune.log').read_text()
    assert 'latency search on torch: measured fractions' in log
    assert len(list((tmp_path / 'cache' / 'latency').glob('PlainCNN-*.json'))) == 1


def test_the_latency_is_measured_at_the_batch_asked_for(tmp_path, monkeypatch):
    monkeypatch.setenv('RAZORLIB_CACHE_DIR', str(tmp_path / 'cache'))
    code = load_tool('prune').main(['--model', 'plain_cnn', '--input-size', '64', '--batch',
                                    '4', '--latency', '0.85', '--runtime-options', 'repeat=5',
                                    '--work-dir', str(tmp_path / 'out')])
    assert code == 0
    log = (tmp_path / 'out' / 'prune.log').read_text()
    assert 'plain_cnn, input 4x3x64x64' in log
    assert '(torch repeat=5, ' in log and 'of 5 interleaved runs' in log
    table = json.loads(next((tmp_path / 'cache' / 'latency').glob('PlainCNN-*.json')).read_text())
    assert table['meta']['inputs'] == [[4, 3, 64, 64]]  # the table was timed at that batch


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the refusal without CUDA')
def test_the_cuda_runtime_without_a_gpu_is_refused_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        load_tool('prune').main(['--model', 'plain_cnn', '--input-size', '16', '--latency',
                                 '0.5', '--runtime', 'cuda', '--work-dir', str(tmp_path / 'out')])
    assert info.value.code == 2 and not (tmp_path / 'out').exists()
    assert '--runtime cuda: torch.cuda.is_available() is False' in capsys.readouterr().err


def test_an_unreachable_budget_exits_2_and_writes_nothing(tmp_path):
    code = load_tool('prune').main(['--model', 'plain_cnn', '--input-size', '16', '--flops',
                                    '0.01', '--max-ratio', '0.5', '--work-dir',
                                    str(tmp_path / 'out')])
    assert code == 2 and not (tmp_path / 'out').exists()


@pytest.mark.parametrize('extra, message', [
    (['--flops', '0.5'], '--flops: for --model only'),
    # given at their default values, or 0: given all the same, and as ignored
    (['--max-ratio', '0', '--model', 'resnet50', '--data-batches', '8', '--except-start-keys'],
     '--model, --max-ratio, --data-batches, --except-start-keys: for --model only; CONFIG mode '
     'keeps the channels of --subnet'),
])
def test_model_options_are_refused_with_a_config(tiny_supernet, tmp_path, monkeypatch, extra,
                                                 message):
    tool = load_tool('prune')
    log = LogCapture(tool, monkeypatch)
    code = tool.main([str(TINY), str(tiny_supernet), '--subnet', 'x.yaml', *extra,
                      '--work-dir', str(tmp_path / 'out')])
    assert code == 2 and message in log.text
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('extra', [['--subnet', 'subnet.yaml'], ['--recalib-batches', '16'],
                                   ['--cfg-options', 'a=1']])
def test_config_options_are_refused_without_a_config(tmp_path, monkeypatch, extra):
    """Without CONFIG, --subnet would be ignored and the default --model pruned."""
    tool = load_tool('prune')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([*extra, '--work-dir', str(tmp_path / 'out')]) == 2
    assert log.text == f'{extra[0]}: for CONFIG mode only (a supernet config, its checkpoint ' \
        'and --subnet); without CONFIG the tool prunes --model resnet50'
    assert not (tmp_path / 'out').exists()


def test_an_earlier_result_is_replaced_only_with_overwrite(tmp_path, monkeypatch):
    tool = load_tool('prune')
    argv = ['--model', 'plain_cnn', '--input-size', '16', '--work-dir', str(tmp_path)]
    assert tool.main([*argv, '--ratio', '0.5']) == 0
    written = (tmp_path / 'channel_cfg.yaml').read_text(), (tmp_path / 'slim.pth').read_bytes()
    log = LogCapture(tool, monkeypatch)
    assert tool.main([*argv, '--ratio', '0.25']) == 2
    assert log.text == f'{tmp_path}: holds the channel_cfg.yaml and slim.pth of an earlier ' \
        'run; pass --overwrite to replace them, or choose another --work-dir'
    assert ((tmp_path / 'channel_cfg.yaml').read_text(),
            (tmp_path / 'slim.pth').read_bytes()) == written
    assert tool.main([*argv, '--ratio', '0.25', '--overwrite']) == 0
    assert (tmp_path / 'channel_cfg.yaml').read_text() != written[0]


def test_contradicting_options_are_refused_by_the_parser():
    tool = load_tool('prune')
    with pytest.raises(SystemExit):
        tool.parse_args(['--pruner', 'RatioPruner', '--importance', 'taylor'])
    with pytest.raises(SystemExit):
        tool.parse_args(['--flops', '0.5', '--params', '0.5'])


@pytest.mark.parametrize('argv, message', [
    (['--importance', 'bogus'], "--importance: importance 'bogus' is not registered; known: "
     r"\[.*'wanda'\]"),
    (['--input-size', '0'], "argument --input-size: expected an integer of at least 1, got '0'"),
    (['--round-to', '0'], "argument --round-to: expected an integer of at least 1, got '0'"),
    (['--data-batches', '-1'], "argument --data-batches: expected an integer of at least 1, "
     "got '-1'"),
    (['--recalib-batches', '-1'], "argument --recalib-batches: expected an integer of at least "
     "0, got '-1'"),
    (['--threads', '0'], "argument --threads: expected an integer of at least 1, got '0'"),
    # a budget is a fraction of the dense model in (0, 1], as the pruners take it
    (['--ratio', '0'], r"argument --ratio: expected a number in \(0, 1\], got '0'"),
    (['--flops', '1.5'], r"argument --flops: expected a number in \(0, 1\], got '1.5'"),
    (['--latency', 'nan'], r"argument --latency: expected a number in \(0, 1\], got 'nan'"),
    (['--quantile', '2'], r"argument --quantile: expected a number in \[0, 1\], got '2'"),
    (['--batch', '0'], "argument --batch: expected an integer of at least 1, got '0'"),
    (['--sensitivity', '--greedy'], 'choose one allocation: --sensitivity or --greedy'),
    (['--global', '--greedy'], 'choose one allocation: --global or --greedy'),
    (['--pruner', 'RatioPruner', '--greedy'], '--greedy: for L1NormPruner'),
    # RatioPruner takes the ratio alone: it would ignore these, and keep 8 of 16 channels
    (['--pruner', 'RatioPruner', '--ratio', '0.5', '--round-to', '5', '--max-ratio', '0.2'],
     "--round-to, --max-ratio: for L1NormPruner \\(the default\\) only; --pruner RatioPruner "
     "keeps the first --ratio of every group's channels"),
    (['--pruner', 'RatioPruner', '--flops', '0.5'], '--flops: for L1NormPruner'),
    # without --data-config, batches are read only by what ranks or allocates by them: a
    # count given for a run reading none would be ignored (no batch, no batch norms
    # re-estimated), even the default one
    (['--ratio', '0.5', '--data-batches', '3'], re.escape(
        "--data-batches: --importance l1 reads no data, so no batch would be read; give "
        "--data-config to re-estimate the slim model's batch norms on its batches, or a "
        "criterion or allocation reading data (--importance activation, apoz, fisher, "
        "taylor or wanda, --sensitivity, --greedy)")),
    (['--importance', 'fpgm', '--global', '--flops', '0.5', '--data-batches', '8'],
     '--data-batches: --importance fpgm reads no data'),
    (['--pruner', 'RatioPruner', '--data-batches', '2'], re.escape(
        "--data-batches: --pruner RatioPruner reads no data, so no batch would be read; give "
        "--data-config to re-estimate the slim model's batch norms on its batches\n")),
    # the runtime's options are checked by name before anything runs, on any machine
    (['--runtime', 'cuda', '--runtime-options', 'grahp=True'], "--runtime-options: "
     r"runtime=dict\(type='cuda', quantile=0.5, grahp=True\): 'grahp' is not a key of the "
     r"cuda runtime \(did you mean 'graph'\?\)"),
    (['--runtime', 'onnxruntime', '--runtime-options', 'graph=True'],
     "'graph' is not a key of the onnxruntime runtime"),
    (['--runtime', 'cuda', '--runtime-options', 'dtype=int8'],
     "--runtime-options: dtype='int8': a floating dtype"),
])
def test_bad_values_are_refused_before_anything_runs(argv, message, capsys):
    tool = load_tool('prune')
    with pytest.raises(SystemExit) as info:
        tool.parse_args(['--model', 'plain_cnn', *argv])
    assert info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.parametrize('argv', [
    ['--importance', 'taylor'], ['--importance', 'wanda', '--global'], ['--sensitivity'],
    ['--greedy'], ['--data-config', 'data.py'],
    ['--pruner', 'RatioPruner', '--data-config', 'data.py']])
def test_data_batches_are_taken_where_batches_are_read(argv):
    """A data criterion or allocation reads them, and --data-config's are read for the
    batch norms whatever the criterion."""
    args = load_tool('prune').parse_args(['--model', 'plain_cnn', *argv, '--data-batches', '3'])
    assert args.data_batches == 3 and '--data-batches' in args.explicit
