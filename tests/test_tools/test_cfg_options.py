"""Every tool that takes --cfg-options refuses a key the config does not have, naming it and
the closest keys the config has, before anything runs (no work dir made); tools/test.py
checks its checkpoint against the model before it makes its work dir too."""
from pathlib import Path
from typing import List

import pytest
from mmengine.config import Config
from mmengine.registry import init_default_scope

from conftest import REPO, TINY, LogCapture, load_tool
from razorlib.registry import MODELS

TYPO = 'val_dataloader.batch_sizee=8'
MESSAGE = '--cfg-options val_dataloader.batch_sizee: the config has no such key (closest: ' \
    'val_dataloader.batch_size, '
PTQ_CONFIG = REPO / 'configs' / 'quantization' / 'ptq' / 'autoslim_plaincnn_digits_trt_int8.py'


@pytest.fixture(scope='module')
def files(tmp_path_factory) -> dict:
    """A search config on the tiny supernet and a subnet file of it."""
    folder = tmp_path_factory.mktemp('cfg_options')
    init_default_scope('razorlib')
    MODELS.build(Config.fromfile(TINY).model).export_subnet().dump(folder / 'subnet.yaml')
    (folder / 'search.py').write_text(
        f'_base_ = [{str(TINY)!r}]\ncustom_hooks = []\n'
        "search_cfg = dict(type='GreedySearchLoop', target_flops=[60000], max_channel_bins=4, "
        'recalib_batches=1)\n')
    return dict(search=folder / 'search.py', subnet=folder / 'subnet.yaml')


def argv(tool: str, files: dict, checkpoint: Path, work_dir: Path) -> List[str]:
    if tool == 'train':
        return [str(TINY), '--work-dir', str(work_dir)]
    if tool == 'get_flops':
        return [str(TINY)]
    if tool == 'deploy':  # --recalibrate-bn makes it read the config before TensorRT
        return [str(PTQ_CONFIG), str(checkpoint), '--recalibrate-bn', '1', '--work-dir',
                str(work_dir)]
    extra = ['--subnet', str(files['subnet'])] if tool == 'prune' else []
    config = files['search'] if tool == 'search' else TINY
    return [str(config), str(checkpoint), *extra, '--work-dir', str(work_dir)]


@pytest.mark.parametrize('tool', ['train', 'test', 'search', 'prune', 'ptq', 'get_flops',
                                  'deploy'])
def test_a_misspelt_key_is_named_with_the_closest_before_anything_runs(
        tool, files, tiny_supernet, tmp_path, monkeypatch):
    module = load_tool(tool)
    log = LogCapture(module, monkeypatch)
    work_dir = tmp_path / 'out'
    code = module.main([*argv(tool, files, tiny_supernet, work_dir), '--cfg-options', TYPO])
    assert code == 2
    assert MESSAGE in log.text
    assert len(log.messages) == 1 and 'Traceback' not in log.text
    assert not work_dir.exists()


def test_the_pipeline_refuses_a_misspelt_key_of_its_config_before_any_step(
        tmp_path, monkeypatch):
    config = REPO / 'configs' / 'nas' / 'spos' / 'spos_shufflenet_digits_subnet.py'
    tool = load_tool('pipeline')
    log = LogCapture(tool, monkeypatch)
    assert tool.main(['--work-dir', str(tmp_path / 'out'), '--from-subnet', str(config),
                      '--cfg-options', 'model.fix_subnett=subnet.yaml']) == 2
    assert '--cfg-options model.fix_subnett: the config has no such key (closest: ' \
        'model.fix_subnet' in log.text
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('option, message', [
    # a registered class's argument: check_config names it with what the class takes
    ('model.foo=1', "model.foo: AutoSlim takes no argument 'foo'; it takes ["),
    ('test_dataloader.batch_sizee=8', '--cfg-options test_dataloader.batch_sizee: the config '
     'has no such key (closest: test_dataloader.batch_size, '),
    ('param_scheduler.3.T_max=1', '--cfg-options param_scheduler.3.T_max: param_scheduler has '
     '2 items, indexed 0 to 1'),
])
def test_the_test_tool_refuses_before_it_makes_its_work_dir(option, message, tiny_supernet,
                                                            tmp_path, monkeypatch):
    tool = load_tool('test')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(TINY), str(tiny_supernet), '--work-dir', str(tmp_path / 'out'),
                      '--cfg-options', option]) == 2
    assert log.text.startswith(f'{TINY}: {message}')
    assert not (tmp_path / 'out').exists()
