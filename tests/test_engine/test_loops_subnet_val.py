"""SubnetValLoop: validates the subnet it is given, recalibrated, and puts the supernet back."""
import copy

import pytest
import torch
import yaml
from mmengine.hooks import EMAHook
from mmengine.runner import Runner
from search_helpers import INPUT_SHAPE, build_runner, runner_cfg

from razorlib.algorithms import AutoSlim
from razorlib.engine.config import ConfigError
from razorlib.engine.loops import SubnetValLoop, WidthSpace, recalibrate_bn
from razorlib.nas import FixedSubnet

SPOS_ARCHITECTURE = dict(
    type='ImageClassifier', head=dict(type='LinearClsHead', num_classes=10),
    backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 2, 2)], stem_channels=8,
                  stem='cifar', last_channels=None))
WIDTHS = {'backbone.stages.0.conv': 4, 'backbone.stages.1.conv': 8,
          'backbone.stages.2.conv': 24}


def export(runner, path, widths=WIDTHS):
    """Write the channel config of ``widths`` and put the supernet back at full width."""
    model = runner.model
    model.set_subnet(WidthSpace(model.pruner).masks(widths))
    model.export_subnet().dump(path)
    model.set_max_subnet()
    return path


def subnet_val(tmp_path, subnet, recalib_batches=2):
    return build_runner(tmp_path / 'val', dict(type='SubnetValLoop', subnet=subnet,
                                               recalib_batches=recalib_batches))


def test_it_validates_the_given_subnet_after_recalibration(tmp_path, monkeypatch):
    path = export(build_runner(tmp_path / 'export'), tmp_path / 'subnet.yaml')
    seen = []
    val_step = AutoSlim.val_step
    monkeypatch.setattr(AutoSlim, 'val_step', lambda self, data: (
        seen.append(WidthSpace(self.pruner).widths(self.pruner.current_subnet)),
        val_step(self, data))[1])
    metrics = subnet_val(tmp_path, str(path)).val()
    assert seen and all(widths == WIDTHS for widths in seen)
    monkeypatch.undo()

    reference = build_runner(tmp_path / 'reference')
    reference.model.set_subnet(WidthSpace(reference.model.pruner).masks(WIDTHS))
    recalibrate_bn(reference.model, reference.train_dataloader, num_batches=2)
    assert metrics == reference.val()


def test_ema_weights_are_validated_with_statistics_of_their_own(tmp_path):
    # mmengine's EMAHook swaps the averaged weights in at before_val_epoch: the loop
    # recalibrates after it, on the weights it validates
    cfg = runner_cfg(tmp_path / 'ema', dict(type='SubnetValLoop', subnet=None,
                                            recalib_batches=2))
    cfg.update(custom_hooks=[dict(type='EMAHook', momentum=0.5)],
               train_cfg=dict(by_epoch=True, max_epochs=1, val_interval=1))
    runner = Runner(**cfg)
    seen = {}

    def val_step(self, data):
        if not seen:
            twin = copy.deepcopy(self)  # the weights validated, EMA's
            recalibrate_bn(twin, runner.train_dataloader, num_batches=2)
            seen.update(used=self.architecture.backbone.stages[0].bn.running_mean.clone(),
                        own=twin.architecture.backbone.stages[0].bn.running_mean)
        return AutoSlim.val_step(self, data)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner.model, 'val_step', val_step.__get__(runner.model))
        runner.train()
    torch.testing.assert_close(seen['used'], seen['own'])


def test_widths_and_a_channel_config_dict_validate_the_same_subnet(tmp_path):
    path = export(build_runner(tmp_path / 'export'), tmp_path / 'subnet.yaml')
    from_file = subnet_val(tmp_path / 'a', str(path)).val()
    assert subnet_val(tmp_path / 'b', dict(WIDTHS)).val() == from_file
    assert subnet_val(tmp_path / 'c', yaml.safe_load(path.read_text())).val() == from_file


def test_the_supernet_subnet_and_bn_statistics_are_restored(tmp_path):
    path = export(build_runner(tmp_path / 'export'), tmp_path / 'subnet.yaml')
    runner = subnet_val(tmp_path, str(path))
    model = runner.model
    model.set_subnet(WidthSpace(model.pruner).masks(dict(WIDTHS, **{
        'backbone.stages.0.conv': 6})))
    before_subnet = model.pruner.current_subnet
    before_bn = {k: v.clone() for k, v in model.state_dict().items() if 'running' in k}
    runner.val()
    after = model.pruner.current_subnet
    assert all(torch.equal(before_subnet[k], after[k]) for k in before_subnet)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before_bn.items())


def test_subnet_file_errors_name_the_file_and_key(tmp_path):
    runner = build_runner(tmp_path / 'export')
    data = yaml.safe_load(export(runner, tmp_path / 'subnet.yaml').read_text())
    data['modules']['backbone.stages.1.conv']['raw_out_channels'] = 20  # another supernet
    (tmp_path / 'other.yaml').write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r'other.yaml: modules.backbone.stages.1.conv: '
                                          r'raw_out_channels is 20, the supernet layer has 16'):
        subnet_val(tmp_path, str(tmp_path / 'other.yaml')).val()
    with pytest.raises(ConfigError, match=r'subnet.backbone.stages.2.conv: a width is a '
                                          r'channel count in \[1, 32\], got 40'):
        subnet_val(tmp_path, dict(WIDTHS, **{'backbone.stages.2.conv': 40})).val()
    with pytest.raises(ConfigError, match='subnet: .*nope.yaml does not exist'):
        subnet_val(tmp_path, str(tmp_path / 'nope.yaml')).val()


def spos_val(tmp_path, subnet):
    cfg = runner_cfg(tmp_path, dict(type='SubnetValLoop', subnet=subnet, recalib_batches=1))
    cfg['model'] = dict(type='SPOS', input_shape=INPUT_SHAPE, architecture=SPOS_ARCHITECTURE)
    return Runner(**cfg)


def test_a_nas_choice_dict_validates_as_its_subnet_file(tmp_path):
    choices = {'backbone.stages.0.0': 'shuffle_7x7', 'backbone.stages.0.1': 'shuffle_3x3'}
    path = tmp_path / 'subnet.yaml'
    FixedSubnet(choices).dump(path)
    from_file = spos_val(tmp_path / 'a', str(path)).val()
    runner = spos_val(tmp_path / 'b', choices)
    before = runner.model.current_subnet
    assert before != choices
    assert runner.val() == from_file
    assert runner.model.current_subnet == before  # put back after validating


def test_a_bad_nas_choice_dict_is_refused_naming_the_key(tmp_path):
    runner = spos_val(tmp_path, {'backbone.stages.0.0': 'shuffle_9x9',
                                 'backbone.stages.0.1': 'shuffle_3x3'})
    with pytest.raises(ConfigError, match="subnet: backbone.stages.0.0: 'shuffle_9x9' is not a "
                                          'choice'):
        runner.val()


def ema_runner(tmp_path, subnet, update_buffers=True):
    """AutoSlim trained one epoch and validated by SubnetValLoop, under an EMAHook."""
    cfg = runner_cfg(tmp_path, dict(type='SubnetValLoop', subnet=subnet, recalib_batches=2))
    cfg.update(custom_hooks=[dict(type='EMAHook', momentum=0.5, update_buffers=update_buffers)],
               train_cfg=dict(by_epoch=True, max_epochs=1, val_interval=1))
    return Runner(**cfg)


def test_an_ema_of_the_buffers_keeps_its_statistics_through_a_recalibrated_validation(
        tmp_path, monkeypatch):
    # EMAHook(update_buffers=True) swaps the BN statistics in at before_val_epoch and
    # out at after_val_epoch: the recalibrated ones must not end in the averaged model
    runner = ema_runner(tmp_path, subnet=None)
    validate, changed = SubnetValLoop.validate, []

    def checked(self, *args, **kwargs):
        ema = next(hook for hook in runner.hooks if isinstance(hook, EMAHook)).ema_model
        before = {k: v.clone() for k, v in ema.module.state_dict().items() if 'running' in k}
        metrics = validate(self, *args, **kwargs)
        changed.extend(k for k, v in ema.module.state_dict().items()
                       if k in before and not torch.equal(v, before[k]))
        return metrics

    monkeypatch.setattr(SubnetValLoop, 'validate', checked)
    runner.train()
    assert runner.val_loop.recalib_batches == 2 and changed == []


def test_a_subnet_is_refused_before_training_under_an_ema_that_swaps_its_masks(tmp_path):
    # the EMA copy's masks would be swapped in for the subnet set: the max subnet was
    # validated whatever subnet was named
    runner = ema_runner(tmp_path, subnet=dict(WIDTHS))
    with pytest.raises(ConfigError, match=r"^custom_hooks: EMAHook\(update_buffers=True\) "
                                          r'swaps the buffers of AutoSlim .* the pruning masks '
                                          r"among them: SubnetValLoop would validate the copy's "
                                          'subnet instead of the one it sets'):
        runner.train()
    assert runner.iter == 0
    ema_runner(tmp_path / 'default', subnet=dict(WIDTHS), update_buffers=False).train()
