"""tools/test.py evaluates a checkpoint and names a missing one."""
from conftest import TINY, LogCapture, load_tool


def test_test_tool_evaluates_a_checkpoint(tiny_supernet, tmp_path, monkeypatch):
    tool = load_tool('test')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(TINY), str(tiny_supernet), '--work-dir', str(tmp_path),
                      '--cfg-options', 'experiment_name=test_tool']) == 0
    assert 'accuracy/top1' in log.messages[-1]


def test_test_tool_names_a_missing_checkpoint(tmp_path, monkeypatch):
    tool = load_tool('test')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(TINY), str(tmp_path / 'none.pth')]) == 2
    assert 'checkpoint ' in log.text and 'none.pth does not exist' in log.text
