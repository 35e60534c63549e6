"""tools/search.py refuses a loop count that is no integer in one line, exit code 2, and
leaves no work dir: it ended in a traceback, the Runner's log folder and config dump left
in a new work dir."""
from pathlib import Path

import pytest

from conftest import TINY, LogCapture, load_tool

GREEDY = dict(type='GreedySearchLoop', target_flops=[60000], max_channel_bins=4,
              recalib_batches=1)


@pytest.mark.parametrize('option, message', [
    ('search_cfg.max_channel_bins=4.5', 'max_channel_bins must be an integer, got 4.5 '
     '(a float)'),
    ('search_cfg.target_flops=60000.0', 'target_flops must be a list of FLOPs counts, e.g. '
     '[1.2e6], got 60000.0'),
])
def test_a_count_that_is_no_integer_is_refused_with_no_work_dir(
        tiny_supernet, tmp_path, monkeypatch, option, message):
    tool = load_tool('search')
    log = LogCapture(tool, monkeypatch)
    config = tmp_path / 'search.py'
    config.write_text(f'_base_ = [{str(TINY)!r}]\ncustom_hooks = []\nsearch_cfg = {GREEDY!r}\n')
    work_dir = tmp_path / 'new' / 'search'
    assert tool.main([str(config), str(tiny_supernet), '--work-dir', str(work_dir),
                      '--cfg-options', f'experiment_name=count_{tmp_path.name}', option]) == 2
    assert len(log.messages) == 1 and message in log.messages[0]
    assert not Path(tmp_path / 'new').exists()
