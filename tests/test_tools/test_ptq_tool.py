"""tools/ptq.py on a digits classifier trained here: INT8 top-1 within 0.5 points of FP32,
a QDQ model onnxruntime runs, the SNR table; and the same for a sliced subnet."""
import importlib.util
import json
from pathlib import Path

import onnx
import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config

from razorlib.datasets import DigitsDataset
from razorlib.pruning import L1NormPruner
from razorlib.registry import MODELS

TOOL = Path(__file__).parents[2] / 'tools' / 'ptq.py'

CONFIG = """
default_scope = 'razorlib'
model = dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(16, 32)),
             head=dict(type='LinearClsHead', num_classes=10),
             data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3, std=[0.5] * 3))
loader = dict(num_workers=0, collate_fn=dict(type='default_collate'))
train_dataloader = dict(loader, batch_size=32, dataset=dict(type='DigitsDataset', split='train'),
                        sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(loader, batch_size=100, dataset=dict(type='DigitsDataset', split='val'),
                      sampler=dict(type='DefaultSampler', shuffle=False))
"""


def load_tool():
    spec = importlib.util.spec_from_file_location('ptq_tool', TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """The config and a plain state_dict of its model trained on the digits (seconds)."""
    folder = tmp_path_factory.mktemp('ptq_tool')
    config = folder / 'digits_cnn.py'
    config.write_text(CONFIG)
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(str(config)).model)
    data = DigitsDataset('train')
    images = torch.stack([item['inputs'] for item in data]) * 2 - 1  # mean 0.5, std 0.5
    labels = torch.tensor([int(item['data_samples'].gt_label) for item in data])
    optimizer = torch.optim.Adam(model.parameters(), 1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 8x8 images: one thread is fastest, and immune to busy cores
    try:
        for _ in range(10):
            for index in torch.randperm(len(images)).split(64):
                loss = F.cross_entropy(model(images[index]), labels[index])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    finally:
        torch.set_num_threads(threads)
    checkpoint = folder / 'model.pth'
    torch.save(model.state_dict(), checkpoint)
    return folder, config, checkpoint, model.eval()


def run(trained, name, *options):
    folder, config, checkpoint, _ = trained
    work_dir = folder / name
    code = load_tool().main([str(config), str(checkpoint), '--work-dir', str(work_dir),
                             '--calib-steps', '8', '--analyse-steps', '2', *options])
    assert code == 0
    return json.loads((work_dir / 'ptq.json').read_text()), work_dir


def test_int8_top1_is_within_half_a_point_of_fp32(trained):
    results, work_dir = run(trained, 'dense')
    top1 = results['top1']
    assert top1['fp32'] > 90
    assert abs(top1['int8_simulated'] - top1['fp32']) <= 0.5
    assert abs(top1['int8_onnxruntime'] - top1['fp32']) <= 0.5
    model = onnx.load(results['onnx'])
    onnx.checker.check_model(model)
    assert 'QuantizeLinear' in {node.op_type for node in model.graph.node}
    log = (work_dir / 'ptq.log').read_text()
    assert 'layer SNR dB' in log and 'graph output' in log
    assert results['output_snr_db']['linear'] > 20


def test_a_subnet_is_sliced_and_its_batch_norms_recalibrated(trained):
    folder, _, _, model = trained
    pruner = L1NormPruner(ratio=0.75)
    pruner.prepare_from_supernet(model, torch.randn(1, 3, 8, 8))
    pruner.set_subnet(pruner.sample_subnet())
    subnet = folder / 'subnet.yaml'
    pruner.export_subnet().dump(subnet)
    results, work_dir = run(trained, 'subnet', '--subnet', str(subnet), '--platform', 'ORT_INT8')
    weights = {item.name: item for item in onnx.load(results['onnx']).graph.initializer}
    assert min(item.dims[0] for name, item in weights.items()
               if name.endswith('weight_quantized') and len(item.dims) == 4) == 12
    assert 'from 8 batches' in (work_dir / 'ptq.log').read_text()
    top1 = results['top1']
    assert abs(top1['int8_onnxruntime'] - top1['fp32']) <= 1.0
