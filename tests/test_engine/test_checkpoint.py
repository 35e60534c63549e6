"""mmengine checkpoints load with weights_only=True; anything else stays refused; a
checkpoint cut short or of another model is named as such."""
import io
import os
import pickle

import pytest
import torch
from mmengine.logging import HistoryBuffer
from mmengine.runner import Runner
from mmengine.runner.checkpoint import _load_checkpoint

import razorlib  # noqa: F401  (registers the globals)
from doctest_helpers import assert_examples_pass
from razorlib.engine import checkpoint_getattr
from razorlib.engine.checkpoint_check import CheckpointError, check_fits, read_checkpoint


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory) -> str:
    """A checkpoint of a short run whose schedulers, hooks and message hub need every
    allow-listed global."""
    work_dir = tmp_path_factory.mktemp('ckpt')
    loader = dict(batch_size=128, num_workers=0, sampler=dict(type='DefaultSampler'),
                  collate_fn=dict(type='default_collate'))
    runner = Runner(
        model=dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(4, 8)),
                   head=dict(type='LinearClsHead', num_classes=10)),
        work_dir=str(work_dir), experiment_name='checkpoint_globals',
        train_dataloader=dict(loader, dataset=dict(type='DigitsDataset', split='train')),
        val_dataloader=dict(loader, dataset=dict(type='DigitsDataset', split='val')),
        val_evaluator=dict(type='Accuracy', topk=(1, )),
        train_cfg=dict(by_epoch=True, max_epochs=1), val_cfg=dict(),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=1e-3)),
        param_scheduler=[dict(type='OneCycleLR', eta_max=0.01, total_steps=12, by_epoch=False),
                         dict(type='MultiStepLR', milestones=[1], by_epoch=True)],
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', save_best='auto')),
        custom_hooks=[dict(type='EMAHook')],
        default_scope='razorlib', randomness=dict(seed=0))
    runner.train()
    return str(work_dir / 'epoch_1.pth')


def test_an_mmengine_checkpoint_loads_with_weights_only(checkpoint):
    data = torch.load(checkpoint, weights_only=True)
    assert {'meta', 'state_dict', 'message_hub', 'optimizer', 'param_schedulers'} <= set(data)
    assert isinstance(data['message_hub']['log_scalars']['train/loss'], HistoryBuffer)
    # mmengine's own loader (what Runner.resume calls) uses torch's default, weights_only
    assert _load_checkpoint(checkpoint, map_location='cpu')['meta']['epoch'] == 1


def saved(obj) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def test_a_pickled_function_is_still_refused():
    with pytest.raises(pickle.UnpicklingError, match='posix.system|os.system'):
        torch.load(saved({'state_dict': {}, 'hook': os.system}))


def test_a_history_buffer_with_a_foreign_statistic_is_refused():
    buffer = HistoryBuffer([1.0], [1])
    # pickled as getattr(HistoryBuffer, 'update'), a lookup mmengine never makes
    buffer._statistics_methods = dict(buffer._statistics_methods, evil=HistoryBuffer.update)
    with pytest.raises(pickle.UnpicklingError, match='refusing getattr'):
        torch.load(saved({'message_hub': buffer}))


@pytest.mark.parametrize('owner, name', [(HistoryBuffer, '__init__'), (HistoryBuffer, 'update'),
                                         (os, 'system'), (dict, 'min')])
def test_getattr_answers_only_the_lookups_of_mmengine_checkpoints(owner, name):
    with pytest.raises(pickle.UnpicklingError, match='refusing getattr'):
        checkpoint_getattr(owner, name)
    assert checkpoint_getattr(HistoryBuffer, 'mean') is HistoryBuffer.mean


def test_the_checks_examples_run():
    assert_examples_pass('razorlib.engine.checkpoint_check')


def test_read_checkpoint_names_what_is_wrong_with_the_file(checkpoint, tmp_path):
    data = open(checkpoint, 'rb').read()
    for size in (0, 10, len(data) // 2, len(data) - 1):  # cut anywhere
        (tmp_path / 'cut.pth').write_bytes(data[:size])
        with pytest.raises(CheckpointError, match=r'cut.pth: not a complete checkpoint \('):
            read_checkpoint(tmp_path / 'cut.pth')
    torch.save({'state_dict': {}, 'hook': os.system}, tmp_path / 'code.pth')
    with pytest.raises(CheckpointError, match='code.pth: refused by weights-only loading '
                       r'\(Trying to load unsupported GLOBAL posix.system'):
        read_checkpoint(tmp_path / 'code.pth')
    with pytest.raises(CheckpointError, match='checkpoint .*none.pth does not exist'):
        read_checkpoint(tmp_path / 'none.pth')
    # torch's legacy (non-zip) format cannot be memory-mapped; it is read as a whole
    torch.save({'w': torch.ones(2)}, tmp_path / 'legacy.pth', _use_new_zipfile_serialization=False)
    assert torch.equal(read_checkpoint(tmp_path / 'legacy.pth')['w'], torch.ones(2))
    assert read_checkpoint(checkpoint)['meta']['epoch'] == 1


def test_a_state_dict_that_is_no_dict_is_refused_naming_the_file(tmp_path):
    """Every tool reads ``checkpoint['state_dict']`` as a dict: a list there was a bare
    ``AttributeError: 'list' object has no attribute 'items'``."""
    torch.save({'state_dict': [torch.ones(2)], 'meta': {}}, tmp_path / 'listed.pth')
    with pytest.raises(CheckpointError, match=r"listed.pth: its 'state_dict' is a list, not "
                       'a dict of tensors'):
        read_checkpoint(tmp_path / 'listed.pth')


class ExtraState(torch.nn.Linear):
    """A module whose extra state is a dict, as torch allows (no tensor, no shape)."""

    def get_extra_state(self):
        return {'version': 2}

    def set_extra_state(self, state):
        pass


def test_entries_that_are_no_tensors_are_compared_and_named_without_a_traceback():
    """A number where the model has a tensor (a hand-edited checkpoint), or a module's
    extra state that is no tensor: ``check_fits`` read ``.shape`` of both and failed with
    a bare AttributeError."""
    numbers = dict(torch.nn.Linear(4, 2).state_dict(), weight=3)
    for partial in (False, True):
        with pytest.raises(CheckpointError, match=r'^num.pth: not a checkpoint of this Linear: '
                           r'.*1 tensor of another shape \(weight: an int here, \(2, 4\) in '
                           r'the model\)'):
            check_fits(torch.nn.Linear(4, 2), numbers, 'num.pth', partial=partial)
    check_fits(ExtraState(4, 2), ExtraState(4, 2).state_dict(), 'extra.pth')
    with pytest.raises(CheckpointError, match=r'_extra_state: \(2,\) here, a dict in the model'):
        check_fits(ExtraState(4, 2), dict(ExtraState(4, 2).state_dict(),
                                          _extra_state=torch.zeros(2)), 'extra.pth')


def test_check_fits_accepts_a_partial_checkpoint_only_when_asked(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))
    head_swapped = dict(model.state_dict(), **{'1.weight': torch.zeros(5, 8),
                                               '1.bias': torch.zeros(5)})
    with pytest.raises(CheckpointError, match=r'2 tensors of another shape \(1.weight: '
                       r'\(5, 8\) here, \(3, 8\) in the model, 1.bias'):
        check_fits(model, head_swapped, 'ft.pth')
    check_fits(model, head_swapped, 'ft.pth', partial=True)  # a new head: fine-tuning
    with pytest.raises(CheckpointError, match=r"ft.pth: .*4 of the model's 4 tensors missing"):
        check_fits(model, {'other.weight': torch.zeros(1)}, 'ft.pth', partial=True)


def conv_bn(width: int, classes: int = 4) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, width, 3), torch.nn.BatchNorm2d(width),
                               torch.nn.Conv2d(width, classes, 1))


def test_a_partial_checkpoint_of_another_width_is_refused_though_its_scalars_fit():
    # num_batches_tracked and the head's bias fit any width: not enough to load it
    with pytest.raises(CheckpointError, match=r"^slim.pth: not a checkpoint of this Sequential: "
                       r"1 of its weight tensors fit .*tensors of another shape \(0.weight: "
                       r"\(8, 3, 3, 3\) here, \(16, 3, 3, 3\) in the model"):
        check_fits(conv_bn(16), conv_bn(8).state_dict(), 'slim.pth', partial=True)
    only_scalars = {'1.num_batches_tracked': torch.tensor(3)}
    with pytest.raises(CheckpointError, match='0 of its weight tensors fit'):
        check_fits(conv_bn(16), only_scalars, 'bn.pth', partial=True)
    # the backbone fits, the head has another class count: fine-tuning, accepted
    check_fits(conv_bn(16), conv_bn(16, classes=10).state_dict(), 'ft.pth', partial=True)


def test_a_partial_checkpoint_with_a_layer_of_another_width_in_the_middle_is_refused():
    """Most tensors fit, but a middle layer has another width (a checkpoint of another
    channel_cfg): it and its neighbours would stay at their initialisation."""
    def net(middle: int) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, middle, 3),
                                   torch.nn.Conv2d(middle, 8, 3), torch.nn.Conv2d(8, 8, 3),
                                   torch.nn.Conv2d(8, 8, 3), torch.nn.Conv2d(8, 4, 1))
    with pytest.raises(CheckpointError, match=r'^other.pth: not a checkpoint of this '
                       r'Sequential: .*1.weight: \(12, 8, 3, 3\) here, \(8, 8, 3, 3\)'):
        check_fits(net(8), net(12).state_dict(), 'other.pth', partial=True)


def test_a_partial_checkpoint_whose_last_pruned_layer_has_another_width_is_refused():
    """Two subnets that differ in their last pruned layer only: its tensors and the head's
    input columns have other shapes, all after the fitting layers, as a new head's would;
    a new head differs in its output rows only."""
    def net(last: int) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 8, 3),
                                   torch.nn.Conv2d(8, 8, 3), torch.nn.Conv2d(8, last, 3),
                                   torch.nn.BatchNorm2d(last), torch.nn.Conv2d(last, 4, 1))
    with pytest.raises(CheckpointError, match=r"^slimB.pth: not a checkpoint of this "
                       r"Sequential: 7 of its weight tensors fit .*7 tensors of another shape "
                       r'\(3.weight: \(6, 8, 3, 3\) here, \(9, 8, 3, 3\) in the model'):
        check_fits(net(9), net(6).state_dict(), 'slimB.pth', partial=True)
