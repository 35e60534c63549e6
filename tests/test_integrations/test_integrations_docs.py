"""The examples in the integrations' and depth pruning's docstrings run and print what
they claim."""
import pytest
from doctest_helpers import assert_examples_pass, modules_of

import razorlib.integrations

pytest.importorskip('transformers')


@pytest.mark.parametrize('name', modules_of(razorlib.integrations, recursive=True)
                         + ['razorlib.pruning.depth'])
def test_docstring_examples(name):
    assert_examples_pass(name)
