"""Variable: value, parameter flag, shape and dtype, and unlinked copies."""
import numpy as np
import pytest
import torch

from razorlib.ir import Operation, Variable


def test_activation_reports_stored_shape_and_dtype():
    var = Variable('x', shape=('batch', 3, None), dtype=torch.float16)
    assert var.value is None
    assert var.shape == ('batch', 3, None)
    assert var.dtype is torch.float16
    assert not var.is_parameter
    assert var.source_op is None and var.dest_ops == []


def test_value_wins_over_stored_shape_and_dtype():
    var = Variable('w', torch.zeros(2, 5, dtype=torch.int8), is_parameter=True, shape=(7, ),
                   dtype=torch.float32)
    assert var.shape == (2, 5)
    assert var.dtype is torch.int8
    var.value = None
    assert var.shape == (7, )
    assert var.dtype is torch.float32


def test_value_converts_numbers_and_arrays_to_tensors():
    var = Variable('c', 3.5)
    assert isinstance(var.value, torch.Tensor) and var.value.item() == 3.5
    var.value = np.arange(3)
    assert torch.equal(var.value, torch.arange(3))


def test_is_parameter_is_a_settable_bool():
    var = Variable('w')
    var.is_parameter = 1
    assert var.is_parameter is True
    var.is_parameter = False
    assert var.is_parameter is False


@pytest.mark.parametrize('entry', [1.5, True, [1], object()])
def test_bad_shape_entry_names_the_variable(entry):
    with pytest.raises(TypeError, match="'x'.*shape entry"):
        Variable('x', shape=(1, entry))


def test_bad_dtype_names_the_variable():
    with pytest.raises(TypeError, match="'x'.*not a torch.dtype"):
        Variable('x', dtype='float32')


def test_copy_is_unlinked_and_shares_value_by_default():
    value = torch.randn(3)
    var = Variable('w', value, is_parameter=True)
    var.source_op = Operation('producer', 'Constant')
    var.dest_ops.append(Operation('consumer', 'Relu'))
    clone = var.copy()
    assert clone is not var
    assert (clone.name, clone.is_parameter, clone.shape) == ('w', True, (3, ))
    assert clone.source_op is None and clone.dest_ops == []
    assert clone.value is value


def test_copy_value_clones_the_tensor():
    var = Variable('w', torch.ones(3), is_parameter=True)
    clone = var.copy(copy_value=True)
    assert torch.equal(clone.value, var.value)
    assert clone.value.data_ptr() != var.value.data_ptr()
    clone.value.add_(1)
    assert torch.equal(var.value, torch.ones(3))


def test_copy_keeps_stored_shape_and_dtype():
    clone = Variable('x', shape=(1, 'n'), dtype=torch.int64).copy()
    assert clone.shape == (1, 'n') and clone.dtype is torch.int64 and clone.value is None


def test_repr_names_links():
    var = Variable('y', shape=(2, ))
    var.source_op = Operation('conv', 'Conv')
    var.dest_ops += [Operation('relu', 'Relu')] * 2
    text = repr(var)
    assert "'y'" in text and "'conv'" in text and "['relu', 'relu']" in text
