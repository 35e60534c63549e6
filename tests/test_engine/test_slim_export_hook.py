"""SlimExportHook with mmengine's EMAHook: slim.pth holds the averaged weights the runner
validated and checkpointed, the model keeps its training weights afterwards, and the
log says which were exported; averaged pruning masks are refused."""
import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import EMAHook
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from razorlib.algorithms import ItePruneAlgorithm
from razorlib.engine.checkpoint_check import read_checkpoint
from razorlib.engine.hooks import SlimExportHook

ITE_PRUNE = (Path(__file__).parents[2] / 'configs' / 'pruning' / 'ite_prune'
             / 'ite_prune_plaincnn_digits.py')


@pytest.fixture(scope='module')
def ema_run(tmp_path_factory) -> Runner:
    """Two epochs of 6 iterations, pruned in two steps at iterations 2 and 3, an EMA of
    momentum 0.01 (far from the training weights), a checkpoint after each epoch."""
    cfg = Config.fromfile(ITE_PRUNE)
    cfg.merge_from_dict({
        'work_dir': str(tmp_path_factory.mktemp('ema_export')), 'experiment_name': 'ema',
        'train_dataloader.batch_size': 256, 'train_cfg.max_epochs': 2,
        'train_cfg.val_interval': 1,
        'default_hooks.checkpoint': dict(type='CheckpointHook', interval=1),
        'model.start': 2, 'model.step_freq': 1, 'model.prune_times': 2,
        'model.architecture.backbone.channels': [8, 16],
        'model.architecture.backbone.strides': [1, 2],
        'custom_hooks': [dict(type='EMAHook', momentum=0.01), dict(type='SlimExportHook')]})
    init_default_scope('razorlib')
    runner = Runner.from_cfg(cfg)
    runner.train()
    return runner


def sliced(runner: Runner, state_dict: dict) -> dict:
    """``state_dict`` (the algorithm's) loaded into a copy of the trained algorithm,
    sliced to its subnet."""
    model = copy.deepcopy(runner.model)
    model.load_state_dict(state_dict)
    return model.slim_architecture().state_dict()


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def test_the_exported_weights_are_the_checkpointed_ema_weights(ema_run):
    work_dir = Path(ema_run.work_dir)
    saved = torch.load(work_dir / 'slim.pth')
    checkpoint = read_checkpoint(work_dir / 'epoch_2.pth')  # mmengine's globals allowed
    # EMAHook writes the averaged weights as the checkpoint's state_dict
    assert max_difference(saved, sliced(ema_run, checkpoint['state_dict'])) == 0
    # ... and the training weights, far from them, are not what was exported
    assert max_difference(saved, ema_run.model.slim_architecture().state_dict()) > 1e-2
    assert saved['backbone.stages.0.conv.weight'].shape[0] < 8  # pruned


def test_the_model_holds_its_training_weights_after_the_export(ema_run):
    # the checkpoint's ema_state_dict holds the training weights at the end of the run
    raw = read_checkpoint(Path(ema_run.work_dir) / 'epoch_2.pth')['ema_state_dict']
    for name, param in ema_run.model.named_parameters():
        assert torch.equal(param, raw[f'module.{name}']), name


def test_the_log_names_the_ema_weights(ema_run):
    log = next(Path(ema_run.log_dir).glob('*.log')).read_text()
    assert 'slim model saved with the EMA weights of EMAHook (as validated and ' \
        'checkpointed)' in log


def stub_runner(model, hooks: list, work_dir: Path) -> SimpleNamespace:
    return SimpleNamespace(model=model, hooks=hooks, work_dir=str(work_dir),
                           logger=SimpleNamespace(info=print, warning=print))


def tiny_pruning() -> ItePruneAlgorithm:
    return ItePruneAlgorithm(
        dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(8, 16)),
             head=dict(type='LinearClsHead', num_classes=10)),
        pruner=dict(type='ImportancePruner', flops=0.5), input_shape=(3, 8, 8))


def test_averaged_pruning_masks_are_refused_before_training(tmp_path):
    runner = stub_runner(tiny_pruning(), [EMAHook(update_buffers=True)], tmp_path)
    with pytest.raises(ValueError, match=r'SlimExportHook: EMAHook\(update_buffers=True\) '
                       'averages the buffers of ItePruneAlgorithm, its pruning masks'):
        SlimExportHook().before_run(runner)
    SlimExportHook().before_run(stub_runner(runner.model, [EMAHook()], tmp_path))


def test_two_ema_hooks_are_refused(tmp_path):
    with pytest.raises(ValueError, match='the runner has 2 EMAHooks'):
        SlimExportHook().before_run(stub_runner(tiny_pruning(), [EMAHook(), EMAHook()],
                                                tmp_path))


def test_without_an_ema_hook_the_training_weights_are_exported(tmp_path, capsys):
    model = tiny_pruning()
    with pytest.warns(UserWarning, match='before pruning reached its target'):
        SlimExportHook().after_train(stub_runner(model, [], tmp_path))
    saved = torch.load(tmp_path / 'slim.pth')
    assert max_difference(saved, model.slim_architecture().state_dict()) == 0
    assert 'slim model saved with the training weights' in capsys.readouterr().out
