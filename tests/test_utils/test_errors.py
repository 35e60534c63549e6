"""An error's first line, to quote in another message: the type, then the message's first
non-blank line, cut to a limit."""
import pytest
import torch
from doctest_helpers import assert_examples_pass

from razorlib.utils.errors import first_line


def _numpy_of(x: torch.Tensor) -> torch.Tensor:
    return x.numpy()


@pytest.mark.filterwarnings('ignore::DeprecationWarning')  # torch.jit.script's
def test_a_torchscript_error_is_quoted_by_its_first_line_of_text():
    with pytest.raises(RuntimeError) as info:
        torch.jit.script(_numpy_of)
    assert str(info.value).startswith('\n')  # what the helper has to skip
    assert first_line(info.value) == ("RuntimeError: 'Tensor' object has no "
                                      "attribute or method 'numpy'.:")


@pytest.mark.parametrize('limit, expected', [
    (None, 'ValueError: ' + 'x' * 400), (300, 'ValueError: ' + 'x' * 285 + '...'),
    (412, 'ValueError: ' + 'x' * 400), (411, 'ValueError: ' + 'x' * 396 + '...')])
def test_a_long_line_is_cut_to_the_limit_saying_so(limit, expected):
    assert first_line(ValueError('x' * 400 + '\nmore'), limit) == expected


def test_a_blank_message_leaves_the_type_alone():
    assert first_line(RuntimeError('  \n ')) == 'RuntimeError'
    assert first_line(RuntimeError('  \n '), with_type=False) == 'RuntimeError'


def test_without_the_type_the_first_line_of_text_alone():
    assert first_line(ValueError('\n 3 channels\nmore'), with_type=False) == '3 channels'


def test_examples():
    assert_examples_pass('razorlib.utils.errors')
