"""benchmarks/pooling.py: the mean and its standard error that pooled benchmark runs
report."""
import doctest
import importlib.util
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / 'benchmarks' / 'pooling.py'


@pytest.fixture(scope='module')
def pooling():
    spec = importlib.util.spec_from_file_location('pooling_benchmark', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_error_is_the_sample_deviation_over_the_root_of_the_count(pooling):
    mean, error = pooling.mean_and_error([1.0, 2.0, 3.0, 6.0])
    assert mean == 3.0
    assert error == pytest.approx(math.sqrt(((4 + 1 + 0 + 9) / 3) / 4))
    assert pooling.mean_and_error([5.0]) == (5.0, 0.0)  # one value: no spread to measure


def test_the_docstring_example_holds(pooling):
    result = doctest.testmod(pooling)
    assert result.attempted == 4 and result.failed == 0


def test_a_verdict_holds_on_the_means_within_two_errors_and_run_by_run(pooling):
    # one figure to keep at or above 3: mean 2.9 +- 0.1 misses, but within 2 SE
    v = pooling.verdict([[2.8], [3.0], [2.8], [3.0]], [(3.0, 1)])
    assert v['holds'] is False and v['close'] is True and v['held_in'] == 2
    assert v['means'][0] == pytest.approx((2.9, 0.05773502691896258))
    # a figure to keep at or below 0 that is above it by more than two errors
    v = pooling.verdict([(1.0, 0.5), (1.0, 0.4)], [(0.0, 1), (0.0, -1)])
    assert (v['holds'], v['close'], v['held_in']) == (False, False, 0)
    # both figures on their sides in every run
    v = pooling.verdict([(0.0, 0.0), (0.1, -0.2)], [(0.0, 1), (0.0, -1)])
    assert (v['holds'], v['close'], v['held_in']) == (True, True, 2)
