"""The examples in the quantization docstrings and docs/quantization/ run as they claim."""
import doctest
import enum
from pathlib import Path

import pytest
from doctest_helpers import assert_examples_pass, modules_of

import razorlib.quantization

PAGES = sorted((Path(__file__).resolve().parents[2] / 'docs' / 'quantization').glob('*.md'))


@pytest.mark.parametrize('name', modules_of(razorlib.quantization, recursive=True))
def test_quantization_docstring_examples(name):
    assert_examples_pass(name)


def test_every_public_class_has_an_example():
    for name in razorlib.quantization.__all__:
        item = getattr(razorlib.quantization, name)
        if isinstance(item, type):
            assert 'Example:' in (item.__doc__ or ''), name
            if not issubclass(item, enum.Enum) and item.__init__ is not object.__init__:
                assert 'Args:' in item.__doc__, name


@pytest.mark.parametrize('page', PAGES, ids=[page.name for page in PAGES])
def test_quantization_docs_page_examples(page):
    result = doctest.testfile(str(page), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
