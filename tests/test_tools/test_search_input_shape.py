"""tools/search.py refuses a supernet whose input_shape is not the size of the images its
subnets are scored on: every FLOPs limit and count would be that of other images."""
from pathlib import Path

from conftest import TINY, LogCapture, load_tool

GREEDY = dict(type='GreedySearchLoop', target_flops=[60000], max_channel_bins=4,
              recalib_batches=1)


def search_config(path: Path) -> str:
    path.write_text(f'_base_ = [{str(TINY)!r}]\ncustom_hooks = []\nsearch_cfg = {GREEDY!r}\n')
    return str(path)


def test_an_input_shape_other_than_the_images_is_refused(tiny_supernet, tmp_path, monkeypatch):
    # the 16x16 digits searched with FLOPs counted at 32x32: each subnet's FLOPs were
    # reported 4x their own (5.20M for a 1.30M subnet), and the targets met at those
    tool = load_tool('search')
    log = LogCapture(tool, monkeypatch)
    work_dir = tmp_path / 'new' / 'search'
    assert tool.main([search_config(tmp_path / 'search.py'), str(tiny_supernet),
                      '--work-dir', str(work_dir), '--cfg-options',
                      f'experiment_name=shape_{tmp_path.name}',
                      'model.input_shape=(3,32,32)']) == 2
    assert len(log.messages) == 1
    assert 'model.input_shape: (3, 32, 32), but the val_dataloader gives images of (3, 16, ' \
        '16) (after the data preprocessor)' in log.messages[0]
    assert log.messages[0].endswith('set model.input_shape=(3, 16, 16)')
    assert not (tmp_path / 'new').exists()


def test_the_images_size_passes(tiny_supernet, tmp_path, monkeypatch):
    tool = load_tool('search')
    LogCapture(tool, monkeypatch)
    work_dir = tmp_path / 'search'
    assert tool.main([search_config(tmp_path / 'search.py'), str(tiny_supernet),
                      '--work-dir', str(work_dir), '--cfg-options',
                      f'experiment_name=shape_ok_{tmp_path.name}']) == 0
    assert (work_dir / 'subnet_flops60000.yaml').is_file()
