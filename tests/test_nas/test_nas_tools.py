"""The NAS configs through tools/train.py and tools/search.py, end to end (short runs)."""
import json
import random
from pathlib import Path

import pytest
import torch
import yaml
from mmengine.config import Config
from mmengine.registry import init_default_scope

from razorlib.nas import FixedSubnet, fix_subnet, remaining_mutables
from razorlib.registry import MODELS
from razorlib.utils import get_model_complexity
from razorlib.utils.complexity import human
from log_capture import LogCapture
from tool_modules import load_tool

REPO = Path(__file__).parents[2]

SPOS = REPO / 'configs' / 'nas' / 'spos'
DARTS = REPO / 'configs' / 'nas' / 'darts'
ONE_EPOCH = ['train_cfg.max_epochs=1', 'train_cfg.val_interval=1',
             'default_hooks.checkpoint.interval=1']


def train(config: Path, work_dir: Path, *options: str) -> int:
    return load_tool('train').main([str(config), '--work-dir', str(work_dir), '--cfg-options',
                                    f'experiment_name={work_dir.name}', *ONE_EPOCH, *options])


@pytest.mark.slow  # whole tool runs
def test_spos_supernet_search_and_subnet_run_through_the_tools(tmp_path):
    assert train(SPOS / 'spos_shufflenet_digits_supernet.py', tmp_path / 'supernet') == 0
    search = [str(SPOS / 'spos_shufflenet_digits_search.py'),
              str(tmp_path / 'supernet' / 'epoch_1.pth'), '--work-dir', str(tmp_path / 'search'),
              '--cfg-options', 'experiment_name=search', 'search_cfg.max_epochs=1',
              'search_cfg.num_candidates=4', 'search_cfg.top_k=2', 'search_cfg.num_mutation=1',
              'search_cfg.num_crossover=1', 'search_cfg.recalib_batches=2']
    assert load_tool('search').main(search) == 0
    best = tmp_path / 'search' / 'best_subnet.yaml'
    choices = yaml.safe_load(best.read_text())
    assert len(choices) == 7 and set(choices.values()) <= {
        'shuffle_3x3', 'shuffle_5x5', 'shuffle_7x7', 'shuffle_xception'}
    results = json.loads((tmp_path / 'search' / 'search_results.json').read_text())
    assert len(results['records']) == 4
    assert all(r['flops'] <= 0.8e6 for r in results['records'])
    assert train(SPOS / 'spos_shufflenet_digits_subnet.py', tmp_path / 'subnet',
                 f'model.fix_subnet={best}') == 0
    assert (tmp_path / 'subnet' / 'epoch_1.pth').is_file()


def test_a_subnet_yaml_with_an_unknown_op_is_refused_by_train(tmp_path):
    bad = tmp_path / 'bad.yaml'
    bad.write_text('backbone.stages.0.1: shuffle_9x9\n')
    assert train(SPOS / 'spos_shufflenet_digits_subnet.py', tmp_path / 'bad',
                 f'model.fix_subnet={bad}') == 2  # a config error, before the work dir
    assert not (tmp_path / 'bad').exists()  # the message: test_fix_subnet.py's bad files


@pytest.mark.slow  # whole tool runs
def test_darts_supernet_derives_a_subnet_that_trains(tmp_path):
    assert train(DARTS / 'darts_digits_supernet.py', tmp_path / 'darts') == 0
    derived = tmp_path / 'darts' / 'subnet_final.yaml'
    assert len(yaml.safe_load(derived.read_text())) == 4
    assert train(DARTS / 'darts_digits_subnet.py', tmp_path / 'subnet',
                 f'model.fix_subnet={derived}') == 0
    cfg = Config.fromfile(str(DARTS / 'darts_digits_subnet.py'))
    cfg.model.fix_subnet = str(derived)
    assert remaining_mutables(MODELS.build(cfg.model)) == []


@pytest.mark.slow  # whole tool runs
def test_the_mbconv_supernet_and_search_run_through_the_tools(tmp_path):
    """The MBConv space (kernel, expand ratio, skip) through the same tools and the
    same EvolutionSearchLoop as the ShuffleNet one; its subnet trains as a plain model."""
    assert train(SPOS / 'spos_mbconv_digits_supernet.py', tmp_path / 'supernet') == 0
    search = [str(SPOS / 'spos_mbconv_digits_search.py'),
              str(tmp_path / 'supernet' / 'epoch_1.pth'), '--work-dir', str(tmp_path / 'search'),
              '--cfg-options', 'experiment_name=search', 'search_cfg.max_epochs=1',
              'search_cfg.num_candidates=3', 'search_cfg.top_k=2', 'search_cfg.num_mutation=1',
              'search_cfg.num_crossover=1', 'search_cfg.recalib_batches=2']
    assert load_tool('search').main(search) == 0
    results = json.loads((tmp_path / 'search' / 'search_results.json').read_text())
    assert results['search'] == 'EvolutionSearchLoop'
    assert results['records'] and all(r['flops'] <= 1.0e6 for r in results['records'])
    best = tmp_path / 'search' / 'best_subnet.yaml'
    choices = yaml.safe_load(best.read_text())
    assert choices['backbone.stages.0.0.kernel_size'] in (3, 5, 7)
    assert choices['backbone.stages.1.1'] in ('skip', 'mbconv')
    assert train(SPOS / 'spos_mbconv_digits_subnet.py', tmp_path / 'subnet',
                 f'model.fix_subnet={best}') == 0
    cfg = Config.fromfile(str(SPOS / 'spos_mbconv_digits_subnet.py'))
    cfg.model.fix_subnet = str(best)
    assert remaining_mutables(MODELS.build(cfg.model)) == []


def logged(tool, monkeypatch) -> list:
    """The messages the tool logs from now on (its refusals too)."""
    return LogCapture(tool, monkeypatch).messages


def untrained_checkpoint(config: Path, path: Path) -> Path:
    """The checkpoint of the (untrained) model of ``config``: what the search tool loads."""
    init_default_scope('razorlib')
    model = MODELS.build(Config.fromfile(str(config)).model)
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)
    return path


@pytest.mark.parametrize('base, search_cfg, message', [
    (DARTS / 'darts_digits_supernet.py',
     "dict(type='EvolutionSearchLoop', max_epochs=1, num_candidates=2, top_k=1, "
     'num_mutation=0, num_crossover=0)',
     'model: EvolutionSearchLoop cannot search a DARTS supernet: a DARTS subnet is derived '
     'by argmax of its architecture weights, not searched'),
    (SPOS / 'spos_mbconv_digits_search.py',
     "dict(_delete_=True, type='GreedySearchLoop', target_flops=[900000])",
     'model: GreedySearchLoop slims the channel widths of a channel-width supernet '
     '(AutoSlim, with a pruner); SPOS has no pruner'),
])
def test_the_search_tool_refuses_a_supernet_its_loop_cannot_search(
        tmp_path, monkeypatch, base, search_cfg, message):
    config = tmp_path / 'search.py'
    config.write_text(f"_base_ = ['{base}']\nsearch_cfg = {search_cfg}\n")
    checkpoint = untrained_checkpoint(config, tmp_path / 'supernet.pth')
    tool = load_tool('search')
    messages = logged(tool, monkeypatch)
    assert tool.main([str(config), str(checkpoint), '--work-dir', str(tmp_path / 'search'),
                      # a name of its own: mmengine keeps a Runner's logger and visualizer
                      # by name, and the refused run removed the folders they write to
                      '--cfg-options', f'experiment_name=refused_{tmp_path.name}']) == 2
    assert len(messages) == 1 and messages[0].startswith(f'{config}: {message}')
    assert not (tmp_path / 'search' / 'search_results.json').exists()


def test_get_flops_counts_a_nas_supernet_as_its_fixed_subnets(tmp_path, monkeypatch):
    config = SPOS / 'spos_mbconv_digits_supernet.py'
    init_default_scope('razorlib')
    model = MODELS.build(Config.fromfile(str(config)).model)
    space, subnet = model.search_space, tmp_path / 'subnet.yaml'
    FixedSubnet(space.active(space.sample(random.Random(0)))).dump(subnet)
    inputs = torch.randn(1, *model.input_shape)
    expected = {name: human(get_model_complexity(fix_subnet(model.architecture, choices),
                                                 inputs).flops)
                for name, choices in (('max subnet', space.max_subnet()),
                                      ('min subnet', space.min_subnet()), ('subnet', subnet))}
    tool = load_tool('get_flops')
    messages = logged(tool, monkeypatch)
    assert tool.main([str(config), '--subnet', str(subnet)]) == 0
    assert messages[0] == 'SPOS on input 1x3x16x16'
    assert {' '.join(row[:-2]): row[-2] for row in map(str.split, messages[2:])} == expected
    assert expected['max subnet'] != expected['min subnet']
