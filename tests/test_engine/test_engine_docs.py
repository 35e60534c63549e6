"""The examples in the engine's docstrings (loops, hooks, config checks) run and print
what they claim."""
import pytest
from doctest_helpers import assert_examples_pass, modules_of

import razorlib.engine


@pytest.mark.parametrize('name', modules_of(razorlib.engine, recursive=True))
def test_docstring_examples(name):
    assert_examples_pass(name)
