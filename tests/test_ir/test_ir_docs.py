"""The examples in the IR's docstrings and in docs/ir.md run and print what they claim."""
import doctest
import enum
import re
from pathlib import Path

import pytest
from doctest_helpers import assert_examples_pass, modules_of

import razorlib.ir
from razorlib.ir.executor import KERNELS, OP_TABLE, ops


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


def test_the_op_table_of_the_docs_names_every_kernel():
    """The page's table of kernel families lists every op the executor runs: one left
    out (as GatherND, CumSum and Einsum would have been) reads as unsupported."""
    KERNELS.import_from_location()
    page = Path(__file__).resolve().parents[2] / 'docs' / 'ir.md'
    rows = [line for line in page.read_text().splitlines()
            if any(line.startswith(f'| `{family}` |') for family in ops.__all__)]
    assert len(rows) == len(ops.__all__)
    named = set(re.findall(r'[A-Za-z][A-Za-z0-9]*', ' '.join(rows)))
    assert sorted(set(OP_TABLE) - named) == []
