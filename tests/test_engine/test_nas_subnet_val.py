"""SubnetValLoop on a DARTS supernet: a subnet is refused (the forward is the mixture of
every candidate, whatever subnet is set); without one, the supernet validates as it is."""
import pytest
from mmengine.runner import Runner
from search_helpers import INPUT_SHAPE, runner_cfg

from razorlib.engine.config import ConfigError
from razorlib.nas import FixedSubnet

DARTS_MODEL = dict(type='DARTS', input_shape=INPUT_SHAPE, architecture=dict(
    type='ImageClassifier', head=dict(type='LinearClsHead', num_classes=10),
    data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3, std=[0.5] * 3),
    backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 2, 2)], stem_channels=8,
                  stem='cifar', last_channels=None, mutable_cfg=dict(type='DiffMutableOP'))))
CHOICES = {'backbone.stages.0.0': 'shuffle_7x7', 'backbone.stages.0.1': 'shuffle_xception'}


def darts_val(work_dir, val_cfg):
    cfg = runner_cfg(work_dir, val_cfg)
    cfg['model'] = DARTS_MODEL
    return Runner(**cfg)


@pytest.mark.parametrize('as_file', [True, False], ids=['file', 'dict'])
def test_a_subnet_of_a_darts_supernet_is_refused_before_any_hook(tmp_path, as_file):
    path = tmp_path / 'subnet.yaml'
    FixedSubnet(CHOICES).dump(path)
    subnet = str(path) if as_file else CHOICES
    runner = darts_val(tmp_path / 'val', dict(type='SubnetValLoop', subnet=subnet,
                                              recalib_batches=1))
    called = []
    runner.call_hook = lambda stage, **kwargs: called.append(stage)
    what = f'the subnet {path}' if as_file else 'a subnet'
    with pytest.raises(ConfigError, match=f'^model: SubnetValLoop cannot validate {what} '
                                          'of a DARTS supernet: its forward is the softmax '
                                          'mixture .* razorlib.nas.fix_subnet'):
        runner.val()
    assert called == ['before_run']  # the runner's; the loop called none


def test_without_a_subnet_a_darts_supernet_validates_as_mmengines_val_loop(tmp_path):
    ours = darts_val(tmp_path / 'ours', dict(type='SubnetValLoop', subnet=None,
                                             recalib_batches=0)).val()
    plain = darts_val(tmp_path / 'plain', dict()).val()
    assert ours == plain and 'accuracy/top1' in ours
