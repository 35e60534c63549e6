"""Every tool that takes a checkpoint refuses one of another model, or one cut short, in
one line with exit code 2 (the cut-short one before it makes its work dir); a config with
a syntax error is named with its file and line."""
from pathlib import Path
from typing import List

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from conftest import TINY, LogCapture, load_tool
from razorlib.registry import MODELS

TOOLS = ['test', 'search', 'prune', 'ptq', 'train']


@pytest.fixture(scope='module')
def files(tmp_path_factory, tiny_supernet) -> dict:
    """A search config, a subnet file, the tiny supernet's checkpoint cut in half, and
    checkpoints of the same supernet at other widths and of a plain classifier."""
    folder = tmp_path_factory.mktemp('refusals')
    init_default_scope('razorlib')
    cfg = Config.fromfile(TINY)
    wider = MODELS.build(dict(cfg.model, architecture=dict(
        cfg.model.architecture, backbone=dict(cfg.model.architecture.backbone,
                                              channels=(16, 32)))))
    torch.save({'meta': {}, 'state_dict': wider.state_dict()}, folder / 'wider.pth')
    torch.save(MODELS.build(cfg.model.architecture).state_dict(), folder / 'plain.pth')
    data = tiny_supernet.read_bytes()
    (folder / 'cut.pth').write_bytes(data[:len(data) // 2])
    supernet = MODELS.build(cfg.model)
    supernet.export_subnet().dump(folder / 'subnet.yaml')
    (folder / 'search.py').write_text(
        f'_base_ = [{str(TINY)!r}]\ncustom_hooks = []\n'
        "search_cfg = dict(type='GreedySearchLoop', target_flops=[60000], max_channel_bins=4, "
        'recalib_batches=1)\n')
    return dict(folder=folder, search=folder / 'search.py', subnet=folder / 'subnet.yaml')


def argv(tool: str, files: dict, checkpoint: Path, work_dir: Path) -> List[str]:
    config = str(files['search'] if tool == 'search' else TINY)
    if tool == 'train':
        return [config, '--resume', str(checkpoint), '--work-dir', str(work_dir)]
    extra = ['--subnet', str(files['subnet'])] if tool == 'prune' else []
    return [config, str(checkpoint), *extra, '--work-dir', str(work_dir)]


def run(name: str, args: List[str], work_dir: Path, monkeypatch) -> tuple:
    """The tool's exit code and what it reported (print_log, or ptq's own log file)."""
    tool = load_tool(name)
    log = LogCapture(tool, monkeypatch)
    code = tool.main(args)
    own_log = work_dir / f'{name}.log'
    return code, log.text + (own_log.read_text() if own_log.is_file() else '')


@pytest.mark.parametrize('tool', TOOLS)
def test_a_checkpoint_of_another_model_is_refused(tool, files, tmp_path, monkeypatch):
    checkpoint = files['folder'] / 'wider.pth'
    code, text = run(tool, argv(tool, files, checkpoint, tmp_path / 'out'), tmp_path / 'out',
                     monkeypatch)
    assert code == 2, text[-2000:]
    assert f'{checkpoint}: not a checkpoint of this AutoSlim' in text
    # the first tensor of another shape, named with both shapes
    assert 'architecture.backbone.stages.0.conv.weight: (16, 3, 3, 3) here, (8, 3, 3, 3)' \
        in text
    assert not (tmp_path / 'out' / 'search_results.json').exists()
    if tool in ('test', 'ptq', 'search'):  # they check it before making the work dir
        assert not (tmp_path / 'out').exists()


def test_a_checkpoint_with_other_keys_names_the_first_missing_and_unexpected(
        files, tmp_path, monkeypatch):
    checkpoint = files['folder'] / 'plain.pth'  # the architecture's state_dict, no AutoSlim
    code, text = run('test', argv('test', files, checkpoint, tmp_path), tmp_path, monkeypatch)
    assert code == 2
    assert "tensors missing (step_count, architecture.backbone.stages.0.conv.weight" in text
    assert 'unexpected (backbone.stages.0.conv.weight' in text


@pytest.mark.parametrize('tool', TOOLS)
def test_a_checkpoint_cut_short_is_one_line_and_leaves_no_work_dir(tool, files, tmp_path,
                                                                   monkeypatch):
    checkpoint = files['folder'] / 'cut.pth'
    code, text = run(tool, argv(tool, files, checkpoint, tmp_path / 'out'), tmp_path / 'out',
                     monkeypatch)
    assert code == 2
    assert text.strip().startswith(f'{checkpoint}: not a complete checkpoint (')
    assert len(text.strip().splitlines()) == 1
    assert not (tmp_path / 'out').exists()


def test_a_config_with_a_syntax_error_names_its_file_and_line(tmp_path, monkeypatch):
    lines = [f'_base_ = [{str(TINY)!r}]'] + [f'v{i} = {i}' for i in range(18)]
    (tmp_path / 'bad.py').write_text('\n'.join(lines + ['train_cfg = dict(max_epochs=1,']))
    tool = load_tool('train')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(tmp_path / 'bad.py'), '--work-dir', str(tmp_path / 'out')]) == 2
    assert log.text == f"{tmp_path / 'bad.py'}: line 20: '(' was never closed: " \
        'train_cfg = dict(max_epochs=1,'
    assert not (tmp_path / 'out').exists()
