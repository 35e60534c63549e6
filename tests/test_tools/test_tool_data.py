"""tools/ptq.py, tools/deploy.py and tools/search.py: dataloaders that cannot give what the
tool reads, and ptq's and deploy's ``--subnet`` that does not fit the model, are refused in
one line naming the key, flag or file, exit code 2, before anything is written; ptq and
deploy run on the dataloaders they checked (each dataset built once); deploy's
comparison of a static-batch graph and its strict deploy.json (TensorRT stood in for by
onnxruntime)."""
import json
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from torch.utils.data import Dataset

from conftest import REPO, TINY, LogCapture, load_tool
from razorlib.datasets import DigitsDataset
from razorlib.registry import DATASETS, MODELS

PTQ_CONFIG = REPO / 'configs' / 'quantization' / 'ptq' / 'autoslim_plaincnn_digits_trt_int8.py'
LOADER = ("dict(batch_size=32, num_workers=0, collate_fn=dict(type='default_collate'), "
          "sampler=dict(type='DefaultSampler', shuffle=False), dataset={}, _delete_=True)")
UNLABELLED = "dict(type='DigitImagesOnly', split='{}')"
EMPTY = "dict(type='DigitImagesOnly', split='{}', empty=True)"


@DATASETS.register_module(force=True)
class DigitImagesOnly(Dataset):
    """A digits split's images upscaled to 16x16 without their labels (``{'inputs': ...}``
    only), as an unlabelled calibration set gives them; none of them with ``empty=True``."""

    def __init__(self, split: str = 'train', empty: bool = False):
        self.digits = DigitsDataset(split=split, upscale=16)
        self.size = 0 if empty else len(self.digits)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict:
        return dict(inputs=self.digits[index]['inputs'])


@DATASETS.register_module(force=True)
class CountedDigits(DigitsDataset):
    """The digits, each build counted in :attr:`builds` under ``key`` (the dataloader key
    it is built for)."""
    builds = Counter()

    def __init__(self, key: str, split: str = 'train', upscale: int = 16,
                 augment: bool = False):
        CountedDigits.builds[key] += 1
        super().__init__(split=split, upscale=upscale, augment=augment)


@pytest.fixture(scope='module')
def supernet(tmp_path_factory):
    """The shipped PTQ config's AutoSlim supernet, untrained, as a state_dict file, and its
    smallest subnet's channel config as a dict."""
    folder = tmp_path_factory.mktemp('tool_data')
    init_default_scope('razorlib')
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(str(PTQ_CONFIG)).model)
    torch.save(model.state_dict(), folder / 'supernet.pth')
    model.set_min_subnet()
    return folder / 'supernet.pth', model.export_subnet().to_dict()


def config_with(folder, base, **sections) -> str:
    """A config over ``base`` with ``sections`` (config text) replacing its own."""
    path = folder / 'data.py'
    path.write_text(f'_base_ = [{str(base)!r}]\n'
                    + ''.join(f'{key} = {text}\n' for key, text in sections.items()))
    return str(path)


def refused(name, argv, work_dir, monkeypatch) -> str:
    """The one line tools/``name``.py reported for ``argv``, checked to be exit code 2 with
    nothing written."""
    tool = load_tool(name)
    if name == 'deploy':
        monkeypatch.setattr(tool, 'unavailable', lambda: None)
    log = LogCapture(tool, monkeypatch)
    assert tool.main([*argv, '--work-dir', str(work_dir)]) == 2, log.text
    assert len(log.messages) == 1 and '\n' not in log.text, log.text
    assert not work_dir.exists()
    return log.text


@pytest.mark.parametrize('tool', ['ptq', 'deploy'])
@pytest.mark.parametrize('key, dataset, message', [
    ('calib_dataloader', EMPTY.format('train'),
     'calib_dataloader.dataset: DigitImagesOnly holds no samples'),
    ('calib_dataloader', "dict(type='DigitzDataset')",
     "calib_dataloader.dataset.type: 'DigitzDataset' is not registered in the dataset registry "
     "(scope 'razorlib')"),
    ('calib_dataloader', "dict(type='DigitsDataset', split='tran')",
     "calib_dataloader: ValueError: split must be one of ('train', 'val', 'test'), got 'tran'"),
    ('val_dataloader', UNLABELLED.format('val'),
     "val_dataloader batch 0 has no targets ('data_samples' with a gt_label each, or a "
     'label per image); the top-1 accuracy compares the predictions with them'),
    ('val_dataloader', EMPTY.format('val'),
     'val_dataloader.dataset: DigitImagesOnly holds no samples'),
], ids=['calib-empty', 'calib-unknown-type', 'calib-refused-value', 'val-unlabelled',
        'val-empty'])
def test_data_the_run_cannot_read_is_refused_before_anything_is_written(
        tool, key, dataset, message, supernet, tmp_path, monkeypatch):
    checkpoint, _ = supernet
    config = config_with(tmp_path, PTQ_CONFIG, **{key: LOADER.format(dataset)})
    text = refused(tool, [config, str(checkpoint), '--cfg-options', 'ptq.calib_steps=2'],
                   tmp_path / 'out', monkeypatch)
    assert text == f'{config}: {message}'


def test_calibration_data_needs_no_labels(supernet, tmp_path):
    checkpoint, _ = supernet
    config = config_with(tmp_path, PTQ_CONFIG,
                         calib_dataloader=LOADER.format(UNLABELLED.format('train')))
    assert load_tool('ptq').main([config, str(checkpoint), '--work-dir', str(tmp_path / 'out'),
                                  '--calib-steps', '2', '--analyse-steps', '1']) == 0
    assert '2 calibration batches of (32, 3, 16, 16)' in (tmp_path / 'out' / 'ptq.log').read_text()


def partial(subnet: dict) -> dict:
    """``subnet`` with its first stage's entries only."""
    return dict(subnet, modules={name: entry for name, entry in subnet['modules'].items()
                                 if name.startswith('backbone.stages.0')})


def inconsistent(subnet: dict) -> dict:
    """``subnet`` with stage 1's convolution reading 7 channels, where stage 0 gives fewer."""
    modules = json.loads(json.dumps(subnet['modules']))
    modules['backbone.stages.1.conv'].update(in_channels=7, in_index=list(range(7)))
    return dict(subnet, modules=modules)


@pytest.mark.parametrize('tool', ['ptq', 'deploy'])
@pytest.mark.parametrize('make, message', [
    (partial, 'modules.backbone.stages.1.bn: the channel config keeps no entry, the supernet '
     'set to its spaces keeps out 64/64'),
    (inconsistent, 'modules.backbone.stages.1.conv: the channel config keeps in 7/32, out '),
    (lambda subnet: dict(subnet, modules={}, params={}),
     'the channel config names no module, so it would quantize the model at full width; '
     'leave --subnet out for that'),
], ids=['partial', 'inconsistent', 'empty'])
def test_a_supernet_subnet_that_does_not_fit_is_refused(tool, make, message, supernet,
                                                        tmp_path, monkeypatch):
    checkpoint, subnet = supernet
    path = tmp_path / 'subnet.json'
    path.write_text(json.dumps(make(subnet)))
    text = refused(tool, [str(PTQ_CONFIG), str(checkpoint), '--subnet', str(path)],
                   tmp_path / 'out', monkeypatch)
    assert text.startswith(f'{PTQ_CONFIG}: --subnet {path}: {message}')


def test_a_dense_models_subnet_whose_slices_disagree_is_refused(supernet, tmp_path,
                                                                monkeypatch):
    _, subnet = supernet
    config = config_with(tmp_path, REPO / 'configs' / 'pruning' / 'distill' /
                         'plaincnn_digits_dense.py')
    init_default_scope('razorlib')
    torch.save(MODELS.build(Config.fromfile(config).model).state_dict(), tmp_path / 'm.pth')
    path = tmp_path / 'subnet.json'
    path.write_text(json.dumps(inconsistent(subnet)))
    text = refused('ptq', [config, str(tmp_path / 'm.pth'), '--subnet', str(path)],
                   tmp_path / 'out', monkeypatch)
    assert text.startswith(f'{config}: --subnet {path}: the model sliced to it fails on a '
                           'train_dataloader batch: ')
    assert 'to have 7 channels' in text


class OrtEngine:
    """deploy's Engine stood in for by onnxruntime on the same ONNX file, recording the
    batch sizes it is given."""
    sizes = []

    def __init__(self, onnx_path, int8, batch_size, workspace_mib):
        import onnxruntime as ort

        from razorlib.quantization import int8_session
        self.session = int8_session(onnx_path) if int8 else ort.InferenceSession(
            str(onnx_path), providers=['CPUExecutionProvider'])
        self.name = self.session.get_inputs()[0].name
        self.plan = b'plan'

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        OrtEngine.sizes.append(len(images))
        return torch.from_numpy(self.session.run(None, {self.name: images.numpy()})[0])


@pytest.mark.parametrize('tool', ['ptq', 'deploy'])
def test_each_dataset_is_built_once(tool, supernet, tmp_path, monkeypatch):
    """The dataloaders are checked before the work dir is made, then read by the run: the
    checked ones, not a second build (which scans an ImageFolder again)."""
    checkpoint, subnet = supernet
    keys = ('calib_dataloader', 'train_dataloader', 'val_dataloader')
    config = config_with(tmp_path, PTQ_CONFIG, **{
        key: f"dict(dataset=dict(type='CountedDigits', key={key!r}))" for key in keys})
    (tmp_path / 'subnet.json').write_text(json.dumps(subnet))  # recalibrates on train
    module = load_tool(tool)
    extra = ['--analyse-steps', '1']
    if tool == 'deploy':
        monkeypatch.setattr(module, 'unavailable', lambda: None)
        monkeypatch.setattr(module, 'Engine', OrtEngine)
        extra = []
    CountedDigits.builds.clear()
    assert module.main([config, str(checkpoint), '--subnet', str(tmp_path / 'subnet.json'),
                        '--work-dir', str(tmp_path / 'out'), *extra,
                        '--cfg-options', 'ptq.calib_steps=2']) == 0
    assert CountedDigits.builds == {key: 1 for key in keys}


@pytest.mark.parametrize('batch_size', [32, 30])
def test_a_static_batch_graph_is_fed_its_batch_and_deploy_json_is_strict(
        batch_size, supernet, tmp_path, monkeypatch):
    checkpoint, _ = supernet
    deploy = load_tool('deploy')
    monkeypatch.setattr(deploy, 'unavailable', lambda: None)
    monkeypatch.setattr(deploy, 'Engine', OrtEngine)
    OrtEngine.sizes = []
    assert deploy.main([str(PTQ_CONFIG), str(checkpoint), '--work-dir', str(tmp_path),
                        '--batch-size', str(batch_size), '--cfg-options', 'ptq.calib_steps=2',
                        'ptq.dynamic_batch=False']) == 0
    assert set(OrtEngine.sizes) == {32}  # the calibration batch the graph is fixed to
    assert len(OrtEngine.sizes) == 2 * 12  # 360 validation images, both engines

    def no_constant(name):
        raise ValueError(f'{name} is not JSON')

    results = json.loads((tmp_path / 'deploy.json').read_text(),
                         parse_constant=no_constant)['results']
    assert set(results['fp32']) == {'top1'}  # no comparison of FP32 with itself
    assert set(results['trt_int8']) == {'snr_db', 'top1', 'agreement'}


def test_an_engine_refuses_a_shape_its_profile_does_not_take(tmp_path):
    deploy = load_tool('deploy')
    engine = object.__new__(deploy.Engine)
    engine.onnx_path, engine.inputs = tmp_path / 'm.onnx', ['input']
    engine.context = SimpleNamespace(set_input_shape=lambda name, shape: False)
    engine.engine = SimpleNamespace(get_tensor_shape=lambda name: (32, 3, 16, 16))
    with pytest.raises(ValueError, match=r"m.onnx: its input 'input' cannot take shape "
                       r'\(8, 3, 16, 16\) \(it takes \(32, 3, 16, 16\)'):
        engine(torch.zeros(8, 3, 16, 16))


def test_deploy_checks_the_config_before_looking_for_tensorrt(tmp_path, monkeypatch):
    deploy = load_tool('deploy')
    log = LogCapture(deploy, monkeypatch)
    monkeypatch.setattr(deploy, 'unavailable', lambda: 'no TensorRT here')
    missing = tmp_path / 'missing.py'
    assert deploy.main([str(missing), 'model.pth', '--work-dir', str(tmp_path / 'out')]) == 2
    assert log.text == f'{missing}: config file {missing} does not exist'
    assert deploy.main([str(PTQ_CONFIG), str(tmp_path / 'model.pth'), '--work-dir',
                        str(tmp_path / 'out')]) == 2
    assert log.messages[-1] == f"{PTQ_CONFIG}: checkpoint: {tmp_path / 'model.pth'} does not exist"
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('key, dataset, message', [
    ('val_dataloader', EMPTY.format('val'),
     'val_dataloader.dataset: DigitImagesOnly holds no samples'),
    ('val_dataloader', UNLABELLED.format('val'),
     "val_dataloader batch 0 has no targets ('data_samples' with a gt_label each, or a "
     'label per image); the val_evaluator scores each subnet against them'),
    ('train_dataloader', EMPTY.format('train'),
     'train_dataloader.dataset: DigitImagesOnly holds no samples'),
], ids=['val-empty', 'val-unlabelled', 'train-empty'])
def test_search_refuses_data_it_cannot_read_before_the_runner(key, dataset, message, tmp_path,
                                                              monkeypatch):
    config = config_with(tmp_path, TINY, search_cfg="dict(type='GreedySearchLoop', "
                         'target_flops=[1e5])', **{key: LOADER.format(dataset)})
    init_default_scope('razorlib')
    torch.save(MODELS.build(Config.fromfile(str(TINY)).model).state_dict(),
               tmp_path / 'supernet.pth')
    text = refused('search', [config, str(tmp_path / 'supernet.pth')], tmp_path / 'out',
                   monkeypatch)
    assert text == f'{config}: {message}'


def test_results_are_written_as_strict_json():
    text = load_tool('ptq').strict_json(
        dict(snr_db=float('inf'), rows=[float('nan'), 1.5], top1={'fp32': 99.0}))
    assert json.loads(text) == dict(snr_db=None, rows=[None, 1.5], top1={'fp32': 99.0})


def test_labels_in_any_form_the_preprocessor_packs_are_read():
    """pseudo_collate gives a list of bare int labels; the data preprocessor packs those
    as it packs data samples and label tensors, so the check takes them too."""
    from razorlib.engine.config import ConfigError
    from razorlib.engine.data_check import batch_inputs, batch_labels
    from razorlib.models.data_preprocessor import pack_labels

    for samples in ([3, 1], torch.tensor([3, 1]), pack_labels([3, 1])):
        assert batch_labels(dict(data_samples=samples), 0, 'val_dataloader', 'why').tolist() \
            == [3, 1]
    for samples in (None, [], [0.5, 1.5]):
        with pytest.raises(ConfigError, match="val_dataloader batch 0 has no targets"):
            batch_labels(dict(data_samples=samples), 0, 'val_dataloader', 'why')
    sizes = [torch.zeros(3, 8, 8), torch.zeros(3, 6, 6)]  # the preprocessor pads these
    assert batch_inputs(dict(inputs=sizes), 0, 'val_dataloader') is sizes
    assert batch_inputs(dict(inputs=sizes[:1] * 2), 0, 'val_dataloader').shape == (2, 3, 8, 8)
