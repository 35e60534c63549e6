"""Test-suite wide setup.

- ``tests/zoo.py`` is importable as ``zoo`` from any test directory.
- ``dense_counts``: which subnets a budget allocation counts (a fixture).
- torch runs on one thread: the test models are tiny, and two OpenMP threads on a busy
  two-core CI machine spin-wait each other and make every small conv many times slower.
  Subprocesses the tests start get ``OMP_NUM_THREADS=1`` for the same reason.
"""
import os
import sys
from typing import List

import pytest
import torch

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

torch.set_num_threads(1)
os.environ.setdefault('OMP_NUM_THREADS', '1')


@pytest.fixture
def dense_counts(monkeypatch) -> List[bool]:
    """Which subnets a budget allocation counts: one entry per ``SubnetMeter`` call of
    the test, True where it counted the dense model (every channel kept)."""
    from razorlib.pruning.allocation import SubnetMeter

    calls: List[bool] = []
    count = SubnetMeter.__call__

    def counting(meter, keep, flops=True):
        calls.append(all(mask.all() for mask in keep.values()))
        return count(meter, keep, flops)

    monkeypatch.setattr(SubnetMeter, '__call__', counting)
    return calls
