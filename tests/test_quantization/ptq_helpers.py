"""Shared by the PTQ tests: a small CNN, quantizing it, running exported models in onnxruntime."""
import functools

import torch
from torch import nn

from razorlib.ir import QuantableOperation, TorchExecutor, from_torch
from razorlib.quantization import calibrate, quantize_graph
from razorlib.quantization.export import (INT8_KERNELS_SATURATE, int8_kernels_saturate,
                                          int8_session)


class SmallNet(nn.Module):
    """conv-relu, a residual conv + add, a max pool, a concat, global pooling and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.body = nn.Conv2d(8, 8, 3, padding=1)
        self.side = nn.Conv2d(8, 4, 1)
        self.head = nn.Linear(12, 5)

    def forward(self, x):
        stem = torch.relu(self.stem(x))
        y = torch.relu(self.body(stem) + stem)
        y = nn.functional.max_pool2d(y, 2)
        y = torch.cat([y, self.side(y)], dim=1)
        return self.head(y.mean((2, 3)))


def batches(count, shape=(2, 3, 8, 8), seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator) for _ in range(count)]


def float_graph(model=None, example=None):
    """The FP32 graph of ``model`` (a seeded SmallNet by default), shapes recorded."""
    if model is None:
        return _small_net_graph().copy(copy_value=True)
    graph = from_torch(model, example)
    TorchExecutor(graph).tracing_operation_meta(example)
    return graph


@functools.lru_cache(maxsize=None)
def _small_net_graph():
    torch.manual_seed(0)
    return float_graph(SmallNet().eval(), batches(1)[0])


def calibrated(graph, platform='TRT_INT8', dispatcher='aggressive', data=None):
    """``graph`` quantized for ``platform`` and calibrated on ``data`` (3 random batches)."""
    graph = quantize_graph(graph, platform, dispatcher)
    calibrate(graph, batches(3) if data is None else data, progress=False)
    return graph


def run_onnxruntime(model, inputs, optimized=True):
    """Run an ONNX ``ModelProto`` on a list of tensors (onnxruntime's default optimizations,
    or none); torch tensors back."""
    session = int8_session(model.SerializeToString(), optimized)
    feeds = {item.name: tensor.numpy() for item, tensor in zip(session.get_inputs(), inputs)}
    return [torch.from_numpy(array) for array in session.run(None, feeds)]


#: Why an optimized onnxruntime session is not held to :data:`STEPS` on this CPU, or None.
ORT_OPTIMIZED_INEXACT = INT8_KERNELS_SATURATE if int8_kernels_saturate() else None

STEPS = 2 + 1e-3
"""The agreement bound of executor and onnxruntime: two quantization steps of the output,
and the float error of measuring them."""


def output_step(graph, name, reference):
    """The quantization step of graph output ``name``: its scale when its producer quantizes
    it, else the step of an int8 symmetric quantization of ``reference``."""
    var = graph.variables[name]
    source = var.source_op
    if isinstance(source, QuantableOperation):
        config = source.output_quant_config[source.outputs.index(var)]
        if config.state.is_activated:
            return float(config.scale)
    return float(reference.abs().max()) / 127


def worst_steps(graph, references, tensors):
    """The largest difference of each output pair, in quantization steps of the output."""
    return max(float((tensor - reference).abs().max()) / output_step(graph, name, reference)
               for name, reference, tensor in zip(graph.outputs, references, tensors))
