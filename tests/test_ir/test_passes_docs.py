"""The examples in the docstrings of ``razorlib.ir.passes`` run and print what they claim."""
import importlib

import pytest
from doctest_helpers import assert_examples_pass, modules_of

import razorlib.ir.passes

MODULES = modules_of(razorlib.ir.passes)


@pytest.mark.parametrize('name', MODULES)
def test_docstring_examples(name):
    assert_examples_pass(name)


def test_every_pass_module_says_what_it_does_and_exports_it():
    for name in MODULES[1:]:
        module = importlib.import_module(name)
        assert module.__doc__ and len(module.__doc__.strip().splitlines()) == 1, name
        assert all(hasattr(module, item) for item in module.__all__), name
