"""The NAS configs through tools/train.py and tools/search.py, end to end (short runs)."""
import json
from pathlib import Path

import pytest
import yaml
from mmengine.config import Config

from razorlib.nas import remaining_mutables
from razorlib.registry import MODELS
from tool_modules import load_tool

REPO = Path(__file__).parents[2]

SPOS = REPO / 'configs' / 'nas' / 'spos'
DARTS = REPO / 'configs' / 'nas' / 'darts'
ONE_EPOCH = ['train_cfg.max_epochs=1', 'train_cfg.val_interval=1',
             'default_hooks.checkpoint.interval=1']


def train(config: Path, work_dir: Path, *options: str) -> int:
    return load_tool('train').main([str(config), '--work-dir', str(work_dir), '--cfg-options',
                                    f'experiment_name={work_dir.name}', *ONE_EPOCH, *options])


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
    with pytest.raises(ValueError, match=f"{bad}: backbone.stages.0.1: 'shuffle_9x9' is not"):
        train(SPOS / 'spos_shufflenet_digits_subnet.py', tmp_path / 'bad',
              f'model.fix_subnet={bad}')


def test_darts_supernet_derives_a_subnet_that_trains(tmp_path):
    assert train(DARTS / 'darts_digits_supernet.py', tmp_path / 'darts') == 0
    derived = tmp_path / 'darts' / 'subnet_final.yaml'
    assert len(yaml.safe_load(derived.read_text())) == 4
    assert train(DARTS / 'darts_digits_subnet.py', tmp_path / 'subnet',
                 f'model.fix_subnet={derived}') == 0
    cfg = Config.fromfile(str(DARTS / 'darts_digits_subnet.py'))
    cfg.model.fix_subnet = str(derived)
    assert remaining_mutables(MODELS.build(cfg.model)) == []


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
