"""Input shapes on a digits CNN: executors refuse another batch size of a static graph; a
graph exported with dynamic_batch runs any batch in the executors and, exported (QDQ and
plain ONNX), in onnxruntime, each sample exactly as at batch 1."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from razorlib.datasets import DigitsDataset
from razorlib.ir import TorchExecutor, from_torch
from razorlib.ir.executor.shapes import InputShapeError
from razorlib.quantization import QuantExecutor, export_graph, quantize_torch_model


class DigitsCNN(nn.Module):
    """conv, BN, ReLU, max pool, conv, BN, ReLU, adaptive average pool, flatten, linear."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.features(x))


@pytest.fixture(scope='module')
def digits():
    """A seeded digits CNN (BN statistics from the images) and 540 training images."""
    data = DigitsDataset('train')
    images = torch.stack([data[index]['inputs'] for index in range(540)]) * 2 - 1
    torch.manual_seed(0)
    model = DigitsCNN()
    with torch.no_grad():
        model.train()(images)  # BN statistics of the data
    return model.eval(), images


def onnxruntime_runner(path):
    """images -> logits of the ONNX model at ``path``, one session for every call."""
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    name = session.get_inputs()[0].name
    return lambda images: torch.from_numpy(session.run(None, {name: images.numpy()})[0])


def test_executors_refuse_a_batch_the_static_graph_was_not_traced_at(digits):
    model, images = digits
    graph = quantize_torch_model(model, [images[:1]], images[:1], dynamic_batch=False,
                                 progress=False)
    message = (r"graph '.*': input 'x' expects shape \(1, 3, 8, 8\), got \(540, 3, 8, 8\); "
               r'axis 0 is fixed to 1 \(export the model with dynamic_batch=True')
    with pytest.raises(InputShapeError, match=message):
        QuantExecutor(graph)(images)
    executor = TorchExecutor(from_torch(model, images[:1]))
    with pytest.raises(ValueError, match=message):  # InputShapeError is a ValueError
        executor(images)
    with pytest.raises(InputShapeError, match=r'got \(1, 3, 16, 16\); axis 2 is fixed to 8'):
        executor(torch.zeros(1, 3, 16, 16))
    with pytest.raises(InputShapeError, match='a tensor of rank 4 is needed'):
        executor(torch.zeros(3, 8, 8))


@pytest.mark.parametrize('platform', ['ORT_INT8', 'TRT_INT8'])
def test_a_dynamic_batch_graph_runs_any_batch_in_onnxruntime_as_at_batch_1(digits, platform,
                                                                           tmp_path):
    model, images = digits
    calibration = list(images.split(32))  # the last batch is shorter: fine, the axis is free
    graph = quantize_torch_model(model, calibration, images[:1], platform=platform,
                                 dynamic_batch=True, progress=False)
    assert graph.inputs['x'].shape == ('batch', 3, 8, 8)
    export_graph(graph, tmp_path / 'int8.onnx')
    export_graph(graph, tmp_path / 'fp32.onnx', 'ONNX')
    for name in ('int8.onnx', 'fp32.onnx'):
        proto = onnx.load(tmp_path / name)
        for value in (*proto.graph.input, *proto.graph.output):
            assert value.type.tensor_type.shape.dim[0].dim_param == 'batch', (name, value.name)
    runs = {name: onnxruntime_runner(tmp_path / name) for name in ('int8.onnx', 'fp32.onnx')}
    for name, run in runs.items():
        whole = run(images)
        assert whole.shape == (540, 10)
        assert torch.equal(whole, torch.cat([run(image[None]) for image in images])), name
    fp32 = runs['fp32.onnx'](images)
    with torch.no_grad():
        np.testing.assert_allclose(fp32.numpy(), model(images).numpy(), atol=1e-4)
    executor = QuantExecutor(graph)
    simulated = executor(images)[0]
    assert simulated.shape == (540, 10) and executor(images[:7])[0].shape == (7, 10)
    int8 = runs['int8.onnx'](images)
    assert (simulated.argmax(1) == int8.argmax(1)).float().mean() > 0.98
