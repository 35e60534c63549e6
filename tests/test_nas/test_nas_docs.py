"""Every docstring example of razorlib.nas (and the NAS algorithms), and of docs/nas.md,
runs as written."""
import doctest
from pathlib import Path

import pytest
from doctest_helpers import assert_examples_pass, modules_of

import razorlib.nas

MODULES = modules_of(razorlib.nas, recursive=True) + [
    'razorlib.algorithms.spos', 'razorlib.algorithms.darts']


@pytest.mark.parametrize('name', MODULES)
def test_examples(name):
    assert_examples_pass(name)


def test_the_nas_page_examples():
    page = Path(__file__).parents[2] / 'docs' / 'nas.md'
    result = doctest.testfile(str(page), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
