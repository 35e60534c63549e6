"""The shared checks of numeric settings: a wrong type is a TypeError, a value out of
range a ValueError, each naming the setting and what it holds."""
import math

import numpy as np
import pytest
from doctest_helpers import assert_examples_pass

from razorlib.utils.checks import integer_number, real_number


def test_examples_run():
    assert_examples_pass('razorlib.utils.checks')


@pytest.mark.parametrize('value, expected', [(3, 3.0), (2.5, 2.5), (np.float32(0.5), 0.5),
                                             (np.int64(7), 7.0)])
def test_real_numbers_come_back_as_floats(value, expected):
    result = real_number(value, 'x')
    assert result == expected and type(result) is float


@pytest.mark.parametrize('value, shown', [('1', "'1' (str)"), (None, 'None (NoneType)'),
                                          (True, 'True (bool)'), ([1], '[1] (list)')])
def test_what_is_no_real_number_is_a_type_error_naming_it(value, shown):
    with pytest.raises(TypeError) as error:
        real_number(value, 'MixedPrecision: max_drop', 'a drop in dB')
    assert str(error.value) == ('MixedPrecision: max_drop must be a number (a drop in dB), '
                                f'got {shown}')


def test_nan_is_refused():
    with pytest.raises(ValueError, match='^x must be a number, got nan$'):
        real_number(math.nan, 'x')


@pytest.mark.parametrize('value', [4, np.int32(4)])
def test_integers_come_back_as_ints(value):
    result = integer_number(value, 'n', minimum=1)
    assert result == 4 and type(result) is int


@pytest.mark.parametrize('value, shown', [(4.0, '4.0 (float)'), ('4', "'4' (str)"),
                                          (False, 'False (bool)'), (None, 'None (NoneType)')])
def test_what_is_no_integer_is_a_type_error_naming_it(value, shown):
    with pytest.raises(TypeError) as error:
        integer_number(value, 'calib_steps', 'a number of batches', minimum=1)
    assert str(error.value) == f'calib_steps must be an integer (a number of batches), got {shown}'


def test_an_integer_below_the_minimum_is_a_value_error():
    with pytest.raises(ValueError, match='^steps must be at least 1, got 0$'):
        integer_number(0, 'steps', minimum=1)
    assert integer_number(-5, 'offset') == -5  # no minimum, no bound
