"""Graphs from ONNX node lists, and running a pass with the executor before and after."""
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper, numpy_helper

from razorlib.ir import BaseGraph, TorchExecutor, from_onnx, to_onnx
from razorlib.ir.passes import build_pass

TOLERANCE = 1e-5


def onnx_graph(nodes: Sequence[onnx.NodeProto], inputs: Dict[str, Sequence],
               outputs: Dict[str, Optional[Sequence]], constants: Optional[Dict] = None,
               opset: int = 17, domains: Sequence[str] = ()) -> BaseGraph:
    """A graph of float32 ``nodes``; ``constants`` become initializers (numpy arrays as
    they are, anything else as float32)."""
    initializers = [numpy_helper.from_array(value if isinstance(value, np.ndarray)
                                            else np.asarray(value, np.float32), name)
                    for name, value in (constants or {}).items()]
    model = helper.make_model(
        helper.make_graph(
            list(nodes), 'g',
            [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
             for name, shape in inputs.items()],
            [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
             for name, shape in outputs.items()],
            initializers),
        opset_imports=[helper.make_opsetid('', opset)]
        + [helper.make_opsetid(domain, 1) for domain in domains])
    return from_onnx(model)


def node(op_type: str, inputs: Sequence[str], output: str, **attributes) -> onnx.NodeProto:
    """A one-output node named after its output."""
    return helper.make_node(op_type, list(inputs), [output], name=output, **attributes)


def random_inputs(graph: BaseGraph, seed: int = 0) -> List[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(var.shape, generator=generator) for var in graph.inputs.values()]


def op_types(graph: BaseGraph) -> List[str]:
    return [op.type for op in graph.topological_sort()]


def assert_close(got: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> None:
    assert len(got) == len(expected)
    for tensor, reference in zip(got, expected):
        torch.testing.assert_close(tensor, reference, atol=TOLERANCE, rtol=TOLERANCE)


def changes(graph: BaseGraph, graph_pass: Any) -> int:
    """Run a pass (a registered name, a config dict or a pass); how many changes it made."""
    result = build_pass(graph_pass)(graph)
    assert result.graph is graph and result.modified == (result.changes > 0)
    return result.changes


def run_pass(graph: BaseGraph, graph_pass: Any,
             inputs: Optional[Sequence[torch.Tensor]] = None) -> int:
    """Apply a pass; the graph stays coherent and the executor's outputs stay the same."""
    inputs = random_inputs(graph) if inputs is None else inputs
    outputs = list(graph.outputs)
    expected = TorchExecutor(graph)(inputs)
    changed = changes(graph, graph_pass)
    graph.check()
    assert list(graph.outputs) == outputs
    assert_close(TorchExecutor(graph)(inputs), expected)
    return changed


def run_onnxruntime(graph: BaseGraph, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    session = ort.InferenceSession(to_onnx(graph).SerializeToString(),
                                   providers=['CPUExecutionProvider'])
    feeds = {item.name: tensor.numpy() for item, tensor in zip(session.get_inputs(), inputs)}
    return [torch.from_numpy(array) for array in session.run(None, feeds)]
