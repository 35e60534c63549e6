"""The examples in the IR's docstrings and in docs/ir.md run and print what they claim."""
import doctest
import enum
import importlib
import pkgutil
from pathlib import Path

import pytest

import razorlib.ir

MODULES = sorted(info.name for info in pkgutil.iter_modules(razorlib.ir.__path__,
                                                            'razorlib.ir.'))


@pytest.mark.parametrize('name', ['razorlib.ir'] + MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_every_public_class_has_an_example():
    for name in razorlib.ir.__all__:
        item = getattr(razorlib.ir, name)
        if isinstance(item, type):
            assert 'Example:' in (item.__doc__ or ''), name
            if not issubclass(item, enum.Enum):
                assert 'Args:' in item.__doc__, name


def test_docs_page_examples():
    page = Path(__file__).resolve().parents[2] / 'docs' / 'ir.md'
    result = doctest.testfile(str(page), module_relative=False)
    assert result.attempted > 0 and result.failed == 0
