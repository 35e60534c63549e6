"""Small graphs and structural snapshots shared by the IR tests."""
import torch

from razorlib.ir import (BaseGraph, OperationQuantizationConfig, QuantableOperation,
                         QuantizationStates, TensorQuantizationConfig)


def conv_relu_graph(name='net'):
    """x -> conv(w, b) -> y -> relu -> z, with x the graph input and z the output."""
    graph = BaseGraph(name)
    x = graph.create_variable('x', shape=('batch', 3, 8, 8))
    graph.mark_variable_as_graph_input(x)
    w = graph.create_variable('w', torch.randn(4, 3, 3, 3), is_parameter=True)
    b = graph.create_variable('b', torch.randn(4), is_parameter=True)
    y = graph.create_variable('y')
    graph.create_operation('Conv', 'conv', inputs=[x, w, b], outputs=[y])
    z = graph.create_variable('z')
    graph.create_operation('Relu', 'relu', inputs=[y], outputs=[z])
    graph.mark_variable_as_graph_output(z)
    return graph


def activated_configs(count, state=QuantizationStates.ACTIVATED):
    return [TensorQuantizationConfig(scale=0.1, offset=0, state=state) for _ in range(count)]


def make_quantable(graph, op, state=QuantizationStates.ACTIVATED):
    """Swap ``op`` for a QuantableOperation with one fresh config per tensor."""
    config = OperationQuantizationConfig(activated_configs(op.num_of_input, state),
                                         activated_configs(op.num_of_output, state))
    quantable = QuantableOperation(op, config)
    graph.replace_operation(op, quantable)
    return quantable


def structure(graph):
    """Everything about a graph's shape that names can express, as plain comparable data."""
    ops = [(key, op.name, op.type, [v.name for v in op.inputs], [v.name for v in op.outputs])
           for key, op in graph.operations.items()]
    variables = [(key, var.name, var.source_op.name if var.source_op else None,
                  [op.name for op in var.dest_ops], var.is_parameter)
                 for key, var in graph.variables.items()]
    return ops, variables, list(graph.inputs), list(graph.outputs)


def fake_quantize(value, config):
    """Symmetric linear fake quantization with the config's scale and integer range."""
    scale = config.scale
    return torch.clamp(torch.round(value / scale), config.quant_min, config.quant_max) * scale


def same_bits(first, second):
    """Bit-for-bit tensor equality: dtype, shape and every byte (NaNs and -0.0 included)."""
    return (first.dtype == second.dtype and first.shape == second.shape
            and torch.equal(first.reshape(-1).view(torch.uint8),
                            second.reshape(-1).view(torch.uint8)))
