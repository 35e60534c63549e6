"""Shared by the tool tests: the tool loader (tests/tool_modules.py), log capture, and a tiny
trained supernet."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from log_capture import LogCapture  # noqa: F401  (the tool tests import it from here)
from tool_modules import load_tool  # noqa: F401  (the tool tests import it from here)

REPO = Path(__file__).parents[2]
TINY = REPO / 'tests' / 'data' / 'configs' / 'autoslim_tiny_digits.py'


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
