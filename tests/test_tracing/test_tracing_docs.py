"""The examples in the tracing and pruning docstrings run and print what they claim."""
import doctest
import importlib
import pkgutil

import pytest

import razorlib.pruning
import razorlib.tracing

MODULES = sorted(info.name for package in (razorlib.tracing, razorlib.pruning)
                 for info in pkgutil.iter_modules(package.__path__, package.__name__ + '.'))


@pytest.mark.parametrize('name', MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
