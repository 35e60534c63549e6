"""Test-suite wide setup.

- ``tests/zoo.py`` is importable as ``zoo`` from any test directory.
- torch runs on one thread: the test models are tiny, and two OpenMP threads on a busy
  two-core CI machine spin-wait each other and make every small conv many times slower.
  Subprocesses the tests start get ``OMP_NUM_THREADS=1`` for the same reason.
"""
import os
import sys

import torch

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

torch.set_num_threads(1)
os.environ.setdefault('OMP_NUM_THREADS', '1')
