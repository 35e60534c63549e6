"""An LSQGraph (and so a QAT) holds one copy of the model's parameters, whatever PTQ passes
ran; its calibrated_graph() holds one more, its own, that training does not change."""
import torch

from razorlib.algorithms import QAT
from razorlib.quantization import LSQGraph, quantable_operations, quantize_torch_model

NET = dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(8, 16)),
           head=dict(type='LinearClsHead', num_classes=4))
PASSES = [dict(type='AdaRound', steps=5), 'BiasCorrection']  # both keep fp32 values aside


def held_bytes(graph, kept_aside=True):
    """Bytes of the distinct storages the graph's values (and, with ``kept_aside``, the
    fp32 values its operations keep aside for ``dequantize``) live in."""
    tensors = [var.value for var in graph.variables.values()
               if isinstance(var.value, torch.Tensor)]
    if kept_aside:
        tensors += [op.fp32_parameter(index) for op in quantable_operations(graph)
                    for index, var in enumerate(op.inputs)
                    if var.is_parameter and var.value is not None]
    return _distinct_bytes(tensors)


def _distinct_bytes(tensors):
    storages = {tensor.untyped_storage().data_ptr(): tensor.untyped_storage().nbytes()
                for tensor in tensors}
    return sum(storages.values())


def test_a_qat_after_adaround_holds_its_weights_once():
    images = [torch.randn(8, 3, 16, 16) for _ in range(2)]
    model = QAT(NET, images, dict(calib_steps=2, ptq_passes=PASSES))
    graph = model.quantized._graph
    weights = _distinct_bytes(list(model.quantized.weights.values()))
    assert weights == 4 * sum(p.numel() for p in model.quantized.weights.values())
    # AdaRound's and BiasCorrection's pre-pass values were a second copy: 5472 of the
    # 5744 bytes of weights, for the life of the QAT
    assert held_bytes(graph) - held_bytes(graph, kept_aside=False) == 0
    assert all(graph.variables[name].value is model.quantized.weights[key]
               for key, name in model.quantized._variables.items())


def test_the_calibrated_graph_holds_one_copy_of_its_own():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 4, 3)).eval()
    batches = [torch.randn(8, 3, 8, 8) for _ in range(2)]
    lsq = LSQGraph(quantize_torch_model(net, batches, batches[0], progress=False,
                                        ptq_passes=['BiasCorrection']))
    graph = lsq.calibrated_graph()
    # it kept a second copy of every parameter aside (the learned values again)
    assert held_bytes(graph) == held_bytes(graph, kept_aside=False)
    trained = {p.untyped_storage().data_ptr() for p in lsq.weights.values()}
    values = {name: var.value.clone() for name, var in graph.variables.items()
              if var.is_parameter and var.value is not None}
    assert not trained & {graph.variables[name].value.untyped_storage().data_ptr()
                          for name in values}
    optimizer = torch.optim.SGD(lsq.parameters(), lr=0.1)
    lsq(batches[1]).square().mean().backward()
    optimizer.step()  # training goes on: the graph handed out stays as it was
    assert all(torch.equal(graph.variables[name].value, value) for name, value in values.items())
