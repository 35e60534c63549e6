"""The configs: all pass the checks, the ImageNet ones train on a tiny fake ImageFolder,
the retrain one trains a subnet, and another project's config reaches razorlib through
custom_imports."""
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.runner import Runner
from PIL import Image

from razorlib.engine.config import check_config, load_config
from optional_deps import mmpretrain_or_skip
from razorlib.registry import DATASETS, MODELS

REPO = Path(__file__).parents[2]
CONFIGS = REPO / 'configs'
AUTOSLIM = CONFIGS / 'pruning' / 'autoslim'
RUNNABLE = sorted(p for p in CONFIGS.rglob('*.py') if '_base_' not in p.parts)


@pytest.mark.parametrize('path', RUNNABLE, ids=lambda p: p.name)
def test_every_config_passes_the_checks(path):
    if 'mmpretrain' in path.name:
        mmpretrain_or_skip()
    check_config(load_config(path))


def data_preprocessors(node):
    """Every ``data_preprocessor`` dict anywhere in a config."""
    if isinstance(node, dict):
        for key, child in node.items():
            if key == 'data_preprocessor' and isinstance(child, dict):
                yield child
            yield from data_preprocessors(child)
    elif isinstance(node, (list, tuple)):
        for child in node:
            yield from data_preprocessors(child)


@pytest.mark.parametrize('path', sorted(CONFIGS.rglob('*.py')),
                         ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_data_preprocessor_normalises_on_the_0_1_scale(path):
    # razorlib's datasets yield images in [0, 1]: ImageNet's 0-255 mean/std (123.675 /
    # 58.395) would map every image to about -2.1, a constant input
    cfg = Config.fromfile(path, import_custom_modules=False)
    for preprocessor in data_preprocessors(cfg.to_dict()):
        for key in ('mean', 'std'):
            values = preprocessor.get(key, ())
            assert all(0 <= value <= 1 for value in values), f'{path.name}: {key}={values}'


def small_run(cfg: Config, work_dir: Path, name: str) -> Config:
    """One short epoch, no checkpoints, single-process loaders."""
    cfg.merge_from_dict({
        'work_dir': str(work_dir), 'experiment_name': name, 'train_cfg.max_epochs': 1,
        'default_hooks.checkpoint': None})
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg.merge_from_dict({f'{loader}.num_workers': 0,
                             f'{loader}.persistent_workers': False})
    return cfg


@pytest.fixture(scope='module')
def fake_imagenet(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp('imagenet')
    rng = np.random.default_rng(0)
    for split in ('train', 'val'):
        for label in ('n01440764', 'n01443537'):
            (root / split / label).mkdir(parents=True)
            for index in range(1):
                pixels = rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / label / f'{index}.JPEG')
    return root


@pytest.mark.parametrize('name', ['autoslim_resnet50_imagenet_supernet.py',
                                  'autoslim_mobilenetv2_imagenet_supernet.py'])
def test_imagenet_supernets_build_and_train_on_a_fake_image_folder(name, fake_imagenet,
                                                                   tmp_path):
    cfg = small_run(Config.fromfile(AUTOSLIM / name), tmp_path, name)
    size = 32  # the configs' 224 works the same; 32 keeps the test fast
    for loader, split in (('train_dataloader', 'train'), ('val_dataloader', 'val'),
                          ('test_dataloader', 'val')):
        cfg.merge_from_dict({f'{loader}.batch_size': 2,
                             f'{loader}.dataset.data_root': str(fake_imagenet / split),
                             f'{loader}.dataset.size': size})
        if split == 'val':  # the config pins val's classes to the train folder's
            assert cfg[loader].dataset.classes == 'data/imagenet/train'
            cfg.merge_from_dict({f'{loader}.dataset.classes': str(fake_imagenet / 'train')})
    cfg.model.input_shape = (3, size, size)
    cfg.model.num_random_samples = 0  # one iteration of max and min: enough to show it trains
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.model.architecture.head.fc.out_features == 1000
    assert runner.message_hub.get_scalar('val/flops_M').current() > 0
    assert (tmp_path / 'subnet_final.yaml').is_file()


def test_the_cifar10_dataset_config_builds_on_fake_batches(tmp_path):
    sys.path.insert(0, str(REPO / 'tests' / 'test_datasets'))
    try:
        from test_cifar import write_batches
    finally:
        sys.path.pop(0)
    write_batches(tmp_path)
    cfg = Config.fromfile(CONFIGS / '_base_' / 'datasets' / 'cifar10.py')
    init_default_scope('razorlib')
    dataset = DATASETS.build(dict(cfg.train_dataloader.dataset, data_root=str(tmp_path)))
    assert len(dataset) == 15 and dataset[0]['inputs'].shape == (3, 32, 32)


def test_the_retrain_config_trains_the_searched_subnet(tmp_path):
    supernet_cfg = Config.fromfile(AUTOSLIM / 'autoslim_plaincnn_digits_supernet.py')
    init_default_scope('razorlib')
    supernet = MODELS.build(supernet_cfg.model)
    supernet.set_subnet(supernet.sample_subnet(random.Random(0)))
    supernet.export_subnet().dump(tmp_path / 'subnet.yaml')
    cfg = Config.fromfile(AUTOSLIM / 'autoslim_plaincnn_digits_subnet_retrain.py')
    cfg.model.channel_cfg = str(tmp_path / 'subnet.yaml')
    runner = Runner.from_cfg(small_run(cfg, tmp_path, 'retrain'))
    runner.train()
    widths = [stage.conv.out_channels for stage in runner.model.backbone.stages]
    assert widths == [int(keep.sum()) for keep in supernet.current_subnet.values()]
    assert runner.message_hub.get_scalar('val/accuracy/top1').current() > 30


@pytest.mark.slow  # a whole run in a subprocess
def test_another_projects_config_uses_autoslim_through_custom_imports(tmp_path):
    script = (
        'import sys\n'
        'from mmengine.config import Config\n'
        'from mmengine.runner import Runner\n'
        'cfg = Config.fromfile(sys.argv[1])\n'  # custom_imports imports razorlib here
        'cfg.work_dir = sys.argv[2]\n'
        'runner = Runner.from_cfg(cfg)\n'
        'runner.train()\n'
        'print(type(runner.model).__module__, type(runner.model.architecture).__module__)\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / 'tests' / 'data')]))
    result = subprocess.run(
        [sys.executable, '-c', script, str(REPO / 'tests' / 'data' / 'configs' /
                                           'extproj_autoslim.py'), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'razorlib.algorithms.autoslim extproj.models' in result.stdout
    assert 'flops_M' in result.stdout + result.stderr
    assert (tmp_path / 'subnet_final.yaml').is_file()
