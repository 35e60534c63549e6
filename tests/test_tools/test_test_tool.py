"""tools/test.py evaluates a checkpoint, names a missing one and refuses bad values."""
from conftest import REPO, TINY, LogCapture, load_tool


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


def test_a_value_the_model_refuses_is_one_line_before_the_work_dir(tiny_supernet, tmp_path,
                                                                   monkeypatch):
    tool = load_tool('test')
    log = LogCapture(tool, monkeypatch)
    config = REPO / 'configs' / 'pruning' / 'ite_prune' / 'ite_prune_plaincnn_digits.py'
    assert tool.main([str(config), str(tiny_supernet), '--work-dir', str(tmp_path / 'w'),
                      '--cfg-options', 'model.pruner.flops=1.5']) == 2
    assert log.messages[-1] == f'{config}: model: flops is a fraction of the dense model in ' \
        '(0, 1], got 1.5'
    assert not (tmp_path / 'w').exists()
