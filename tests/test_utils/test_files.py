"""atomic_write_text: a failed write leaves the old file and no temporary file."""
import pytest

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
