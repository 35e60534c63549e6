"""The examples in the layer kinds' docstrings run and print what they claim."""
import pytest
from doctest_helpers import assert_examples_pass, modules_of

import razorlib.layers
import razorlib.utils.complexity


@pytest.mark.parametrize('name', modules_of(razorlib.layers) + ['razorlib.utils.complexity'])
def test_docstring_examples(name):
    assert_examples_pass(name)
