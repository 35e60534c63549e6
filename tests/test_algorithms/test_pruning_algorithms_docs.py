"""Every docstring example of the pruning algorithms and their export hook runs as
written."""
import pytest
from doctest_helpers import assert_examples_pass

MODULES = ['razorlib.algorithms.pruning_base', 'razorlib.algorithms.ite_prune',
           'razorlib.algorithms.group_fisher', 'razorlib.algorithms.slimming',
           'razorlib.algorithms.distill', 'razorlib.algorithms.building',
           'razorlib.engine.hooks.slim_export']


@pytest.mark.parametrize('name', MODULES)
def test_examples(name):
    assert_examples_pass(name)
