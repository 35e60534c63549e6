"""tools/ptq.py: a digits classifier trained here (INT8 top-1 within 0.5 points of FP32,
a QDQ model onnxruntime runs, the SNR table), an AutoSlim supernet checkpoint and a
subnet of it, and the mistakes it reports."""
import json

import onnx
import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from conftest import REPO, TINY, LogCapture, load_tool
from razorlib.datasets import DigitsDataset
from razorlib.pruning import L1NormPruner
from razorlib.registry import MODELS

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
    for _ in range(10):
        for index in torch.randperm(len(images)).split(64):
            loss = F.cross_entropy(model(images[index]), labels[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    checkpoint = folder / 'model.pth'
    torch.save(model.state_dict(), checkpoint)
    return config, checkpoint, model.eval()


def run(config, checkpoint, work_dir, *options):
    code = load_tool('ptq').main([str(config), str(checkpoint), '--work-dir', str(work_dir),
                                  '--calib-steps', '8', '--analyse-steps', '2', *options])
    results = work_dir / 'ptq.json'
    return code, json.loads(results.read_text()) if results.exists() else None


def test_int8_top1_is_within_half_a_point_of_fp32(trained, tmp_path):
    config, checkpoint, _ = trained
    code, results = run(config, checkpoint, tmp_path)
    assert code == 0
    top1 = results['top1']
    assert top1['fp32'] > 90
    assert abs(top1['int8_simulated'] - top1['fp32']) <= 0.5
    assert abs(top1['int8_onnxruntime'] - top1['fp32']) <= 0.5
    model = onnx.load(results['onnx'])
    onnx.checker.check_model(model)
    assert 'QuantizeLinear' in {node.op_type for node in model.graph.node}
    log = (tmp_path / 'ptq.log').read_text()
    assert 'layer SNR dB' in log and 'graph output' in log
    assert results['output_snr_db']['linear'] > 20


def test_a_subnet_is_sliced_and_its_batch_norms_recalibrated(trained, tmp_path):
    config, checkpoint, model = trained
    pruner = L1NormPruner(ratio=0.75)
    pruner.prepare_from_supernet(model, torch.randn(1, 3, 8, 8))
    pruner.set_subnet(pruner.sample_subnet())
    pruner.export_subnet().dump(tmp_path / 'subnet.yaml')
    code, results = run(config, checkpoint, tmp_path / 'out', '--subnet',
                        str(tmp_path / 'subnet.yaml'), '--platform', 'ORT_INT8')
    assert code == 0
    weights = onnx.load(results['onnx']).graph.initializer
    assert min(item.dims[0] for item in weights
               if item.name.endswith('weight_quantized') and len(item.dims) == 4) == 12
    assert 'from 8 batches' in (tmp_path / 'out' / 'ptq.log').read_text()
    top1 = results['top1']
    assert abs(top1['int8_onnxruntime'] - top1['fp32']) <= 1.0


def test_the_batches_reported_are_those_used_not_those_asked_for(trained, tmp_path):
    # more than the loaders hold: the log and ptq.json say what was used
    config, checkpoint, _ = trained
    code, results = run(config, checkpoint, tmp_path, '--recalibrate-bn', '1000',
                        '--analyse-steps', '50')
    assert code == 0
    init_default_scope('razorlib')
    train = len(Runner.build_dataloader(Config.fromfile(str(config)).train_dataloader))
    assert results['batches']['batch_norm'] == train < 1000
    assert results['batches']['analysed'] < 50
    log = (tmp_path / 'ptq.log').read_text()
    assert f'batch-norm statistics from {train} batches' in log
    assert f"({results['batches']['analysed']} validation batches)" in log


def test_an_autoslim_checkpoint_at_full_width_and_at_a_subnet(tiny_supernet, tmp_path):
    init_default_scope('razorlib')
    supernet = MODELS.build(Config.fromfile(TINY).model)
    supernet.set_min_subnet()
    supernet.export_subnet().dump(tmp_path / 'min.yaml')
    full_code, full = run(TINY, tiny_supernet, tmp_path / 'full')
    min_code, smallest = run(TINY, tiny_supernet, tmp_path / 'min', '--subnet',
                             str(tmp_path / 'min.yaml'))
    assert full_code == min_code == 0
    widths = [[item.dims[0] for item in onnx.load(results['onnx']).graph.initializer
               if item.name.endswith('weight_quantized') and len(item.dims) == 4]
              for results in (full, smallest)]
    assert widths[0] == [8, 16] and all(a < b for a, b in zip(widths[1], widths[0]))


PTQ_CONFIG = """
_base_ = ['./digits_cnn.py']
ptq = dict(platform='ORT_INT8', observer=dict(type='PercentileObserver', percentile=99.9),
           dispatcher=dict(type='ConservativeDispatcher'), calib_steps=4, dynamic_batch=True,
           export=dict(type='QDQ_ONNX'))
calib_dataloader = dict(batch_size=50, num_workers=0, collate_fn=dict(type='default_collate'),
                        dataset=dict(type='DigitsDataset', split='train'),
                        sampler=dict(type='DefaultSampler', shuffle=False))
"""


def test_a_ptq_config_sets_the_quantization(trained, tmp_path):
    config, checkpoint, _ = trained
    ptq_config = config.parent / 'digits_cnn_ptq.py'
    ptq_config.write_text(PTQ_CONFIG)
    code, results = run(ptq_config, checkpoint, tmp_path)
    assert code == 0
    settings = results['settings']
    assert settings['platform'] == results['platform'] == 'ORT_INT8'
    assert settings['observer'] == {'type': 'PercentileObserver', 'percentile': 99.9}
    assert settings['calib_steps'] == 8  # --calib-steps 8 of run() overrides ptq.calib_steps
    log = (tmp_path / 'ptq.log').read_text()
    assert '8 calibration batches of (50, 3, 8, 8)' in log and 'ORT_INT8' in log
    model = onnx.load(results['onnx'])
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == 'batch'
    top1 = results['top1']
    assert abs(top1['int8_onnxruntime'] - top1['fp32']) <= 1.0


@pytest.mark.parametrize('name', ['autoslim_plaincnn_digits_trt_int8.py',
                                  'autoslim_plaincnn_digits_ort_int8_kl.py'])
def test_the_shipped_ptq_configs_run(name, tmp_path):
    config = REPO / 'configs' / 'quantization' / 'ptq' / name
    init_default_scope('razorlib')
    torch.manual_seed(0)
    supernet = MODELS.build(Config.fromfile(str(config)).model)  # untrained: a smoke test
    torch.save(supernet.state_dict(), tmp_path / 'supernet.pth')
    code, results = run(config, tmp_path / 'supernet.pth', tmp_path / 'out')
    assert code == 0
    expected = Config.fromfile(str(config)).ptq
    assert results['settings']['platform'] == expected.platform
    assert results['settings']['observer'] == dict(expected.observer)
    assert set(results['top1']) == {'fp32', 'int8_simulated', 'int8_onnxruntime'}


def test_trt_json_export_and_a_static_batch(trained, tmp_path):
    config, checkpoint, _ = trained
    code, results = run(config, checkpoint, tmp_path, '--export-format', 'TRT_JSON',
                        '--no-dynamic-batch')
    assert code == 0
    assert sorted(path.name for path in tmp_path.glob('digits_cnn_int8.*')) == [
        'digits_cnn_int8.json', 'digits_cnn_int8.onnx']
    assert set(results['top1']) == {'fp32', 'int8_simulated'}  # no INT8 model for onnxruntime
    assert results['settings']['dynamic_batch'] is False
    model = onnx.load(results['onnx'])
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 32
    assert abs(results['top1']['int8_simulated'] - results['top1']['fp32']) <= 0.5


def refused(config, checkpoint, work_dir, *options, monkeypatch=None) -> str:
    """What the tool reported for a run it must refuse before it makes its work dir: exit
    code 2, nothing written."""
    tool = load_tool('ptq')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(config), str(checkpoint), '--work-dir', str(work_dir),
                      '--calib-steps', '8', '--analyse-steps', '2', *options]) == 2
    assert not work_dir.exists()
    return log.text


def test_mistakes_are_reported_with_exit_code_2_and_no_work_dir(trained, tmp_path,
                                                                monkeypatch):
    config, checkpoint, _ = trained
    text = refused(config, tmp_path / 'missing.pth', tmp_path / 'missing',
                   monkeypatch=monkeypatch)
    assert 'missing.pth does not exist' in text
    torch.save({'head.fc.weight': torch.zeros(3, 3)}, tmp_path / 'other.pth')
    text = refused(config, tmp_path / 'other.pth', tmp_path / 'other', monkeypatch=monkeypatch)
    assert text.startswith(f"{tmp_path / 'other.pth'}: not a checkpoint of this ImageClassifier")
    (tmp_path / 'subnet.yaml').write_text(
        'version: 1\nmodules:\n  backbone.stages.0.conv: {out_channels: 4}\n')
    text = refused(config, checkpoint, tmp_path / 'bad', '--subnet', str(tmp_path / 'subnet.yaml'),
                   monkeypatch=monkeypatch)
    assert "missing key 'raw_out_channels'" in text
    bad_ptq = config.parent / 'bad_ptq.py'
    bad_ptq.write_text("_base_ = ['./digits_cnn.py']\nptq = dict(observers='kl')\n")
    text = refused(bad_ptq, checkpoint, tmp_path / 'bad_ptq', monkeypatch=monkeypatch)
    assert 'ptq.observers: no such setting' in text
    text = refused(config, checkpoint, tmp_path / 'typo', '--cfg-options',
                   'val_dataloader.batch_sizee=10', monkeypatch=monkeypatch)
    assert text.startswith(f'{config}: --cfg-options val_dataloader.batch_sizee: the config '
                           'has no such key (closest: val_dataloader.batch_size, ')


@pytest.mark.parametrize('flag, value, message', [
    ('--analyse-steps', '0', "argument --analyse-steps: expected an integer of at least 1, "
     "got '0'"),
    ('--top', '-1', "argument --top: expected an integer of at least 1, got '-1'"),
    ('--recalibrate-bn', '-5', "argument --recalibrate-bn: expected an integer of at least 0, "
     "got '-5'"),
    ('--calib-steps', '0', "argument --calib-steps: expected an integer of at least 1, got '0'"),
    ('--top', 'all', "argument --top: expected an integer of at least 1, got 'all'"),
    ('--threads', '0', "argument --threads: expected an integer of at least 1, got '0'"),
])
def test_a_count_out_of_range_is_refused_before_anything_is_written(
        flag, value, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        run('config.py', 'model.pth', tmp_path / 'out', flag, value)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / 'out').exists()


def test_trt_json_for_onnxruntime_is_refused_before_calibration(trained, tmp_path,
                                                                monkeypatch):
    config, checkpoint, _ = trained
    log = refused(config, checkpoint, tmp_path / 'out', '--platform', 'ORT_INT8',
                  '--export-format', 'TRT_JSON', monkeypatch=monkeypatch)
    assert '--export-format TRT_JSON: TensorRT dynamic ranges are symmetric and per tensor, ' \
        'so they need the TRT_INT8 platform, not --platform ORT_INT8' in log


def test_an_export_for_another_platform_is_refused_before_calibration(trained, tmp_path,
                                                                      monkeypatch):
    """export_graph refuses ptq.export TRT_INT8 for an ORT_INT8 graph, but only after
    calibration: the tool refuses it up front, as it does TRT_JSON."""
    config, checkpoint, _ = trained
    log = refused(config, checkpoint, tmp_path / 'out', '--platform', 'ORT_INT8',
                  '--cfg-options', 'ptq.export=TRT_INT8', monkeypatch=monkeypatch)
    assert 'ptq.export TRT_INT8: the graph is quantized for --platform ORT_INT8, and an ' \
        'export for TRT_INT8 would not be its model' in log


@pytest.mark.parametrize('section, message', [
    ("passes=['FuseBatchNrom']", "ptq.passes: no graph pass 'FuseBatchNrom' in razorlib's"),
    ("observer=dict(type='percentile', percentil=99.9)",
     "ptq.observer: PercentileObserver.__init__() got an unexpected keyword argument "
     "'percentil'"),
    ("observer=dict(type='percentile', percentile=120)",
     'ptq.observer: percentile must lie in (0, 100], got 120'),
    ("dispatcher=dict(type='conservative', level=2)",
     'ptq.dispatcher: ConservativeDispatcher() takes no arguments'),
])
def test_a_ptq_section_that_cannot_be_built_is_refused_before_calibration(
        section, message, trained, tmp_path, monkeypatch):
    config, checkpoint, _ = trained
    ptq_config = tmp_path / 'typo.py'
    ptq_config.write_text(f"_base_ = [{str(config)!r}]\nptq = dict({section})\n")
    log = refused(ptq_config, checkpoint, tmp_path / 'out', monkeypatch=monkeypatch)
    assert f'{ptq_config}: {message}' in log
    assert 'Traceback' not in log


def test_a_failed_run_leaves_no_earlier_results_beside_its_model(trained, tmp_path,
                                                                 monkeypatch):
    import razorlib.quantization

    def broken(*args, **kwargs):
        raise RuntimeError('analysis failed')

    monkeypatch.setattr(razorlib.quantization, 'analyse_error', broken)
    config, checkpoint, _ = trained
    (tmp_path / 'ptq.json').write_text('{"top1": {"fp32": 99.0}}')
    (tmp_path / 'digits_cnn_int8.json').write_text('{}')  # an earlier TRT_JSON export's
    with pytest.raises(RuntimeError, match='analysis failed'):
        run(config, checkpoint, tmp_path, '--overwrite')
    assert (tmp_path / 'digits_cnn_int8.onnx').is_file()
    assert not (tmp_path / 'ptq.json').exists()
    assert not (tmp_path / 'digits_cnn_int8.json').exists()


def test_a_model_with_nothing_quantized_is_refused_at_export(trained, tmp_path, monkeypatch):
    # the export's refusal was a traceback; before it, the FP32 model was written as INT8
    import razorlib.quantization
    from razorlib.quantization.passes import keep_in_float
    quantize = razorlib.quantization.quantize_torch_model

    def all_in_float(*args, **kwargs):
        graph = quantize(*args, **kwargs)
        for op in razorlib.quantization.quantable_operations(graph):
            keep_in_float(op)
        return graph

    monkeypatch.setattr(razorlib.quantization, 'quantize_torch_model', all_in_float)
    config, checkpoint, _ = trained
    tool = load_tool('ptq')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(config), str(checkpoint), '--work-dir', str(tmp_path / 'out'),
                      '--calib-steps', '8', '--analyse-steps', '2']) == 2
    assert f"{config}: export_qdq_onnx: graph 'main_graph' has no quantized operation" in \
        log.text
    assert 'Traceback' not in log.text
    assert not (tmp_path / 'out' / 'digits_cnn_int8.onnx').exists()


def test_an_earlier_result_is_replaced_only_with_overwrite(trained, tmp_path, monkeypatch):
    config, checkpoint, _ = trained
    (tmp_path / 'ptq.json').write_text('{"top1": {}}')
    (tmp_path / 'digits_cnn_int8.onnx').write_bytes(b'earlier')
    tool = load_tool('ptq')
    log = LogCapture(tool, monkeypatch)
    argv = [str(config), str(checkpoint), '--work-dir', str(tmp_path), '--calib-steps', '8',
            '--analyse-steps', '2']
    assert tool.main(argv) == 2
    assert log.text == f'{tmp_path}: holds the ptq.json and digits_cnn_int8.onnx of an ' \
        'earlier run; pass --overwrite to replace them, or choose another --work-dir'
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        'digits_cnn_int8.onnx', 'ptq.json']  # untouched, and no ptq.log
    assert (tmp_path / 'digits_cnn_int8.onnx').read_bytes() == b'earlier'
    assert tool.main([*argv, '--overwrite']) == 0
    assert json.loads((tmp_path / 'ptq.json').read_text())['top1']['fp32'] > 90
    onnx.checker.check_model(onnx.load(str(tmp_path / 'digits_cnn_int8.onnx')))


def test_a_pruning_algorithm_checkpoint_is_quantized_at_its_pruned_widths(
        tmp_path, monkeypatch):
    """An ItePrune checkpoint holds its subnet in its masks: the tool quantizes the slim
    architecture (the masks' widths), not the dense one with the masks dropped."""
    config = REPO / 'configs' / 'pruning' / 'ite_prune' / 'ite_prune_plaincnn_digits.py'
    init_default_scope('razorlib')
    torch.manual_seed(0)
    algorithm = MODELS.build(Config.fromfile(str(config)).model)
    orders = algorithm.pruner.channel_orders()
    algorithm.set_subnet({gid: algorithm.pruner.keep_ratio(group, 0.5, orders[gid])
                          for gid, group in algorithm.pruner.groups.prunable.items()})
    widths = [module.out_channels for module in algorithm.slim_architecture().modules()
              if isinstance(module, torch.nn.Conv2d)]
    checkpoint = tmp_path / 'ite_prune.pth'
    torch.save(algorithm.state_dict(), checkpoint)
    code, results = run(config, checkpoint, tmp_path / 'ptq')
    assert code == 0
    exported = [item.dims[0] for item in onnx.load(results['onnx']).graph.initializer
                if item.name.endswith('weight_quantized') and len(item.dims) == 4]
    assert exported == widths and widths[0] < 32
    tool = load_tool('ptq')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(config), str(checkpoint), '--work-dir', str(tmp_path / 'refused'),
                      '--subnet', str(checkpoint)]) == 2
    assert 'holds the subnet it pruned to; leave --subnet out' in log.text
