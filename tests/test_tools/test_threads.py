"""The tools pick torch's thread count themselves (one for a small model or a busy
machine); ``--threads N`` and ``OMP_NUM_THREADS`` override the rule."""
import pytest
import torch

from conftest import TINY, LogCapture, load_tool
from doctest_helpers import assert_examples_pass
from razorlib.engine.config import ConfigError
from razorlib.engine.threads import SMALL_MODEL_PARAMS, choose_threads

SMALL = torch.nn.Linear(10, 10)
BIG = torch.nn.Linear(1024, SMALL_MODEL_PARAMS // 1024 + 1)


@pytest.mark.parametrize('requested, model, environ, load, expected', [
    (3, SMALL, {'OMP_NUM_THREADS': '1'}, 0.0, 3),  # --threads first
    (None, SMALL, {'OMP_NUM_THREADS': '4'}, 0.0, 8),  # torch follows OMP_NUM_THREADS
    (None, SMALL, {}, 0.0, 1),  # a small model on an idle machine
    (None, BIG, {}, 0.2, 8),  # a big model on an idle 16-core machine: torch's default
    (None, BIG, {}, 11.6, 4),  # busy: the idle cores
    (None, BIG, {}, 40.0, 1),  # overloaded: one
    (None, None, {}, 0.0, 8),  # no model: by the load
])
def test_the_rule(requested, model, environ, load, expected):
    choice = choose_threads(requested, model, environ=environ, default=8, cpus=16, load=load)
    assert choice.threads == expected
    assert str(choice).endswith('(--threads N to change)')


def test_a_thread_count_below_one_is_refused():
    with pytest.raises(ConfigError, match='--threads: at least 1, got 0'):
        choose_threads(0)
    with pytest.raises(SystemExit):
        load_tool('get_flops').parse_args(['cfg.py', '--threads', '0'])


@pytest.fixture
def many_threads(monkeypatch):
    """torch on 2 threads and no OMP_NUM_THREADS, as a user's shell starts a tool; the
    suite's one thread afterwards."""
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(1)


def test_a_tool_runs_a_small_model_on_one_thread(many_threads, tiny_supernet, tmp_path,
                                                 monkeypatch):
    tool = load_tool('test')
    LogCapture(tool, monkeypatch)
    assert tool.main([str(TINY), str(tiny_supernet), '--work-dir', str(tmp_path)]) == 0
    assert torch.get_num_threads() == 1
    log = next(tmp_path.glob('*/*.log')).read_text()
    assert 'threads: 1 thread: the model has 1586 parameters, fewer than 1M' in log


def test_threads_option_overrides_the_rule(many_threads, monkeypatch):
    tool = load_tool('get_flops')
    LogCapture(tool, monkeypatch)
    assert tool.main([str(TINY), '--threads', '2']) == 0
    assert torch.get_num_threads() == 2
    assert tool.main([str(TINY)]) == 0
    assert torch.get_num_threads() == 1


def test_the_examples_run():
    assert_examples_pass('razorlib.engine.threads')
