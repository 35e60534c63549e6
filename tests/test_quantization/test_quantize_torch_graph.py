"""quantize_graph on a graph exported from a torch model: every op placed, configs coherent."""
import pytest
import torch
from torch import nn

from razorlib.ir import QuantableOperation, from_torch
from razorlib.quantization import TargetPlatform, quantize_graph


class Block(nn.Module):
    """Conv-BN-ReLU stem, a residual add, a concat, pooling, a flatten and a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.body = nn.Conv2d(8, 8, 3, padding=1)
        self.side = nn.Conv2d(8, 4, 1)
        self.head = nn.Linear(12, 5)

    def forward(self, x):
        stem = self.stem(x)
        y = torch.relu(self.body(stem) + stem)
        y = torch.cat([y, self.side(y)], dim=1)
        y = nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.head(y)


@pytest.fixture(scope='module')
def exported():
    torch.manual_seed(0)
    return from_torch(Block().eval(), torch.randn(1, 3, 8, 8))


@pytest.mark.parametrize('dispatcher', ['aggressive', 'allin', 'conservative', 'pointwise'])
@pytest.mark.parametrize('platform', [TargetPlatform.TRT_INT8, TargetPlatform.ORT_INT8])
def test_quantized_torch_graph_is_coherent(exported, platform, dispatcher):
    graph = quantize_graph(exported.copy(), platform, dispatcher)
    graph.check()
    for op in graph.operations.values():
        assert isinstance(op.platform, TargetPlatform)
        assert isinstance(op, QuantableOperation) == (op.platform is platform), op.name
        if isinstance(op, QuantableOperation):
            assert len(op.config_with_variable) == op.num_of_input + op.num_of_output
    convs = [op for op in graph.operations.values() if op.type == 'Conv']
    assert len(convs) == 3 and all(isinstance(op, QuantableOperation) for op in convs)
    assert all(op.input_quant_config[1].channel_axis == 0 for op in convs)


class FloatOnly(nn.Module):
    """LayerNorm, Tanh, Softmax: no op type TensorRT int8 runs."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return torch.tanh(self.norm(x)).softmax(-1)


def test_a_graph_with_nothing_to_quantize_is_said_so():
    # quantize_graph used to return this graph unchanged without a word, and export_graph
    # then wrote the plain FP32 model for a graph the user had quantized for TRT_INT8.
    graph = from_torch(FloatOnly().eval(), torch.randn(2, 6, 16))
    with pytest.warns(UserWarning) as record:
        quantize_graph(graph, 'TRT_INT8')
    messages = [str(item.message) for item in record]
    assert messages == [
        "quantize_graph: no operation of graph 'main_graph' runs on TRT_INT8, so the graph "
        'stays all in floating point: none of its op types (LayerNormalization, Softmax, '
        'Tanh) is quantizable there (TRT_INT8 quantizes Add, AveragePool, Clip, Concat, '
        'Conv, ConvTranspose, Gemm, GlobalAveragePool, MatMul, MaxPool, ...)']
    assert not any(isinstance(op, QuantableOperation) for op in graph.operations.values())


def test_quantizable_ops_all_dispatched_elsewhere_are_said_so():
    graph = from_torch(nn.Sequential(nn.Conv2d(3, 4, 1)).eval(), torch.randn(1, 3, 4, 4))
    conv, = graph.operations
    with pytest.warns(UserWarning, match=r"^quantize_graph: no operation of graph 'main_graph' "
                      r'runs on ORT_INT8, so the graph stays all in floating point: its ops of '
                      r'types quantizable there \(Conv\) were dispatched to other platforms '
                      r'\(see the dispatcher and dispatching_table\)$'):
        quantize_graph(graph, 'ORT_INT8', dispatching_table={conv: 'FP32'})
