"""The executor checks every graph input's dtype, next to its shape: exact widening casts
within a kind are made, any other dtype is an InputDtypeError naming the input."""
import pickle

import pytest
import torch

from razorlib.ir import BaseGraph, TorchExecutor
from razorlib.ir.executor.shapes import InputDtypeError, check_input_dtype
from razorlib.ir.variable import Variable


def doubling_graph(dtype):
    graph = BaseGraph(name='g')
    x = graph.create_variable('x', shape=('batch', 2), dtype=dtype)
    graph.mark_variable_as_graph_input(x)
    two = graph.create_variable('two', torch.tensor(2, dtype=dtype), is_parameter=True)
    mul = graph.create_operation('Mul', 'mul', inputs=[x, two],
                                 outputs=[graph.create_variable('y')])
    graph.mark_variable_as_graph_output(mul.outputs[0])
    return graph


@pytest.mark.parametrize('given', [torch.int64, torch.float64, torch.bool, torch.complex64])
def test_a_tensor_of_another_kind_or_a_narrowing_cast_is_refused(given):
    executor = TorchExecutor(doubling_graph(torch.float32))
    with pytest.raises(InputDtypeError, match=f"^graph 'g': input 'x' expects dtype "
                                              f"torch.float32, got {given}; convert the tensor "
                                              r"\(tensor.to\(torch.float32\)"):
        executor(torch.ones(3, 2, dtype=given))


def test_an_integer_batch_for_a_float_input_gets_the_scaling_hint():
    with pytest.raises(TypeError, match='after any scaling an integer image needs'):
        TorchExecutor(doubling_graph(torch.float32))(torch.ones(3, 2, dtype=torch.uint8))


@pytest.mark.parametrize('expected, given', [(torch.float32, torch.float16),
                                             (torch.float32, torch.bfloat16),
                                             (torch.int64, torch.int32),
                                             (torch.int64, torch.uint8)])
def test_an_exact_widening_cast_is_made(expected, given):
    out = TorchExecutor(doubling_graph(expected))(torch.ones(3, 2, dtype=given))[0]
    assert out.dtype == expected and torch.equal(out, torch.full((3, 2), 2, dtype=expected))


def test_a_narrowing_integer_cast_is_refused():
    with pytest.raises(InputDtypeError, match='expects dtype torch.int32, got torch.int64'):
        TorchExecutor(doubling_graph(torch.int32))(torch.ones(3, 2, dtype=torch.int64))


def test_an_input_without_a_dtype_takes_any_tensor():
    x = Variable('x')
    tensor = torch.ones(2, dtype=torch.int64)
    assert check_input_dtype('g', x, tensor) is tensor


def test_tracing_records_the_dtype_that_runs_then_check():
    graph = doubling_graph(None)
    executor = TorchExecutor(graph)
    executor.tracing_operation_meta(torch.ones(3, 2))
    assert graph.inputs['x'].dtype == torch.float32
    with pytest.raises(InputDtypeError, match='got torch.float64'):
        executor(torch.ones(3, 2, dtype=torch.float64))


def test_the_error_pickles_with_its_fields():
    error = InputDtypeError('g', 'x', torch.float32, torch.int64, where='batch 3')
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.where == 'batch 3'
    assert str(error).startswith("batch 3: graph 'g': input 'x' expects dtype torch.float32")
