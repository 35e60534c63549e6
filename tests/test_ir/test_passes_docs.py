"""The examples in the docstrings of ``razorlib.ir.passes`` run and print what they claim."""
import doctest
import importlib
import pkgutil

import pytest

import razorlib.ir.passes

MODULES = sorted(info.name for info in pkgutil.iter_modules(razorlib.ir.passes.__path__,
                                                            'razorlib.ir.passes.'))


@pytest.mark.parametrize('name', ['razorlib.ir.passes'] + MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_every_pass_module_says_what_it_does_and_exports_it():
    for name in MODULES:
        module = importlib.import_module(name)
        assert module.__doc__ and len(module.__doc__.strip().splitlines()) == 1, name
        assert all(hasattr(module, item) for item in module.__all__), name
