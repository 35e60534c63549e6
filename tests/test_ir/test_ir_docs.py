"""The examples in the IR's docstrings and in docs/ir.md run and print what they claim."""
import doctest
import enum
from pathlib import Path

import pytest
from doctest_helpers import assert_examples_pass, modules_of

import razorlib.ir


@pytest.mark.parametrize('name', modules_of(razorlib.ir))
def test_docstring_examples(name):
    assert_examples_pass(name)


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
