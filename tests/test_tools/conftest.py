"""Shared by the tool tests: the tool loader (tests/tool_modules.py), log capture, and a tiny
trained supernet."""
import functools
import inspect
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool  # noqa: F401  (the tool tests import it from here)

REPO = Path(__file__).parents[2]
TINY = REPO / 'tests' / 'data' / 'configs' / 'autoslim_tiny_digits.py'


class LogCapture:
    """Keeps the messages a tool logs: those of its ``print_log``, which is replaced, and
    the refusals it logs with ``razorlib.utils.cli.refuse``, which runs as it is with
    mmengine's ``print_log`` replaced while it does (replaced for longer, it would also
    catch what mmengine's registries log)."""

    def __init__(self, tool: ModuleType, monkeypatch):
        import mmengine.logging

        from razorlib.utils import cli

        self.messages = []
        refuse = inspect.unwrap(cli.refuse)  # not an earlier capture's wrapper

        def record(msg, logger=None, level=None):
            self.messages.append(msg)

        @functools.wraps(refuse)
        def recorded_refuse(*args, **kwargs):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(mmengine.logging, 'print_log', record)
                return refuse(*args, **kwargs)

        # raising=False: a tool that logs nothing but refusals (ptq) has no print_log
        monkeypatch.setattr(tool, 'print_log', record, raising=False)
        monkeypatch.setattr(cli, 'refuse', recorded_refuse)

    @property
    def text(self) -> str:
        return '\n'.join(self.messages)


@pytest.fixture(scope='session')
def tiny_supernet(tmp_path_factory) -> Path:
    """The checkpoint of the tiny digits supernet after one epoch of tools/train.py."""
    work_dir = tmp_path_factory.mktemp('tiny_supernet')
    code = load_tool('train').main([str(TINY), '--work-dir', str(work_dir), '--cfg-options',
                                    'experiment_name=tiny_supernet'])
    assert code == 0
    return work_dir / 'epoch_1.pth'


@pytest.fixture
def run_python():
    """Run ``python ARGS...`` in the checkout, with it and ``tests/data`` first on the path."""

    def run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
        path = os.pathsep.join([str(REPO), str(REPO / 'tests' / 'data')])
        env = dict(os.environ, PYTHONPATH=path)
        return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=timeout)

    return run
