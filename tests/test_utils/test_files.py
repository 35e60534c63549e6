"""atomic_write_text: a failed write leaves the old file and no temporary file; the file
gets the mode the umask gives, as ``open`` would."""
import os
import stat

import pytest

from doctest_helpers import assert_examples_pass
from razorlib.pruning import ChannelConfig
from razorlib.utils import atomic_write_text


def test_writes_through_a_temporary_file(tmp_path):
    target = tmp_path / 'deep' / 'out.json'
    atomic_write_text(target, '{"a": 1}')
    atomic_write_text(target, '{"a": 2}')
    assert target.read_text() == '{"a": 2}'
    assert [p.name for p in target.parent.iterdir()] == ['out.json']


def test_a_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / 'out.json'
    atomic_write_text(target, 'old')
    with pytest.raises(TypeError):
        atomic_write_text(target, b'not text')
    assert target.read_text() == 'old'
    assert [p.name for p in tmp_path.iterdir()] == ['out.json']


@pytest.mark.parametrize('umask', [0o022, 0o077, 0o002])
def test_a_written_file_gets_the_mode_of_the_umask_like_open_does(tmp_path, umask):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / 'cfg.yaml', 'a: 1\n')
        with open(tmp_path / 'plain.txt', 'w') as f:  # what checkpoints and logs get
            f.write('x')
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / 'cfg.yaml').stat().st_mode)
    assert mode == 0o666 & ~umask == stat.S_IMODE((tmp_path / 'plain.txt').stat().st_mode)


def test_a_channel_config_and_a_search_state_are_readable_by_the_group_and_others(tmp_path):
    old = os.umask(0o022)
    try:
        ChannelConfig({}).dump(tmp_path / 'subnet.yaml')
        atomic_write_text(tmp_path / 'search_state.json', '{}')
    finally:
        os.umask(old)
    for name in ('subnet.yaml', 'search_state.json'):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


def test_the_example_runs():
    assert_examples_pass('razorlib.utils.files')


def test_a_symlinked_path_is_written_where_it_points(tmp_path):
    """os.replace put the file in the link's place: the link was gone and its target kept
    the old text."""
    target = tmp_path / 'real' / 'state.json'
    target.parent.mkdir()
    target.write_text('old')
    link = tmp_path / 'state.json'
    link.symlink_to(target)
    atomic_write_text(link, 'new')
    assert link.is_symlink() and target.read_text() == 'new'
