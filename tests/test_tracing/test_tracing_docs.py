"""The examples in the tracing and pruning docstrings run and print what they claim."""
import pytest
from doctest_helpers import assert_examples_pass, modules_of

import razorlib.pruning
import razorlib.tracing


@pytest.mark.parametrize('name', modules_of(razorlib.tracing) + modules_of(razorlib.pruning))
def test_docstring_examples(name):
    assert_examples_pass(name)
