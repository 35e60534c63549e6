"""The graph IR: operations and variables in a graph, with quantization configs; ONNX in
and out (``from_onnx``, ``to_onnx``, ``from_torch``) and a torch executor.

Example:
    >>> from razorlib.ir import BaseGraph
    >>> graph = BaseGraph()
    >>> x = graph.create_variable('x')
    >>> graph.mark_variable_as_graph_input(x)
    >>> relu = graph.create_operation('Relu', inputs=[x], outputs=[graph.create_variable('y')])
    >>> graph.check()
"""
from .executor import TorchExecutor, UnsupportedOperationError
from .graph import BaseGraph
from .graph_check import (GraphCheckError, check_inputs_provided, find_graph_problems,
                          find_unprovided_inputs)
from .graph_compare import graphs_structurally_equal, structural_differences
from .graph_store import GraphStore
from .onnx_io import from_onnx, to_onnx
from .operation import DEFAULT_OPSET, UNSPECIFIED_PLATFORM, Operation, Opset
from .opsocket import SOCKET_RULES, OpSocket, SocketRule, TensorRole, socket_for
from .passes import GraphPass, PassManager, PassResult
from .quant_config import (DEFAULT_POLICY, OperationQuantizationConfig, QuantizationProperty,
                           QuantizationStates, RoundingPolicy, TensorQuantizationConfig,
                           copy_configs, copy_operation_configs)
from .quantable import QuantableOperation, QuantFunction
from .search import SearchableGraph
from .torch_export import from_torch
from .variable import EMPTY_NAME, Dim, Variable

__all__ = [
    'BaseGraph', 'DEFAULT_OPSET', 'DEFAULT_POLICY', 'Dim', 'EMPTY_NAME', 'GraphCheckError',
    'GraphPass', 'GraphStore', 'OpSocket', 'Operation', 'OperationQuantizationConfig', 'Opset',
    'PassManager', 'PassResult', 'QuantFunction', 'QuantableOperation', 'QuantizationProperty',
    'QuantizationStates', 'RoundingPolicy', 'SOCKET_RULES', 'SearchableGraph', 'SocketRule',
    'TensorQuantizationConfig', 'TensorRole', 'TorchExecutor', 'UNSPECIFIED_PLATFORM',
    'UnsupportedOperationError', 'Variable', 'check_inputs_provided', 'copy_configs',
    'copy_operation_configs', 'find_graph_problems', 'find_unprovided_inputs', 'from_onnx',
    'from_torch', 'graphs_structurally_equal', 'socket_for', 'structural_differences', 'to_onnx'
]
