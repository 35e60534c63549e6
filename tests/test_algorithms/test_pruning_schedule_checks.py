"""Pruning algorithms refuse or warn up front: a target the rules cannot meet (at build),
a run shorter than the schedule (SlimExportHook.before_train), a slim model exported
short of the target (after_train); GroupFisher resumes its Fisher exactly; slimming's
sparsity is a finite real number."""
import copy
from types import SimpleNamespace

import pytest
import torch
from mmengine.logging import MMLogger
from mmengine.optim import OptimWrapper

from pruning_helpers import digits_batch, tiny_classifier
from razorlib.algorithms import GroupFisherAlgorithm, ItePruneAlgorithm, SlimmingAlgorithm
from razorlib.engine.checkpoint_check import check_fits
from razorlib.engine.hooks.slim_export import SlimExportHook


def stub_runner(model, tmp_path, max_iters: int) -> SimpleNamespace:
    return SimpleNamespace(model=model, max_iters=max_iters, work_dir=str(tmp_path),
                           logger=MMLogger.get_instance('schedule_checks'), hooks=[])


def ite(**kwargs) -> ItePruneAlgorithm:
    return ItePruneAlgorithm(tiny_classifier(), input_shape=(3, 8, 8),
                             pruner=dict(type='ImportancePruner', flops=0.5), **kwargs)


# ---------------------------------------------------------------- unreachable targets
def test_an_unreachable_target_is_refused_when_the_algorithm_is_built():
    unreachable = dict(type='ImportancePruner', flops=0.01)
    with pytest.raises(ValueError, match=r'flops=0.01 cannot be met.*flops>=0\.05'):
        ItePruneAlgorithm(tiny_classifier(), pruner=unreachable, start=1000,
                          input_shape=(3, 8, 8))
    with pytest.raises(ValueError, match='flops=0.01 cannot be met'):
        GroupFisherAlgorithm(tiny_classifier(), input_shape=(3, 8, 8),
                             pruner={**unreachable, 'importance': 'fisher'})
    with pytest.raises(ValueError, match='cannot be met'):
        ItePruneAlgorithm(tiny_classifier(), input_shape=(3, 8, 8),
                          pruner=dict(type='ImportancePruner', flops=0.3, max_ratio=0.5))


# ---------------------------------------------------------------- schedule vs run length
def test_a_run_ending_before_the_last_step_is_warned_before_training(tmp_path):
    model = ite(start=450, step_freq=45, prune_times=5)
    hook = SlimExportHook()
    with pytest.warns(UserWarning, match=r'last pruning step is at iteration 630 \(start=450, '
                      r'prune_times=5, step_freq=45\), but the run has 45 iterations'):
        hook.before_train(stub_runner(model, tmp_path, 45))
    assert model.schedule_overrun(631) is None
    assert 'iteration 630' in model.schedule_overrun(630)
    slim = SlimmingAlgorithm(tiny_classifier(), prune_at=100, input_shape=(3, 8, 8))
    assert 'Lower prune_at' in slim.schedule_overrun(50)


def test_group_fisher_warns_when_the_run_has_too_few_intervals(tmp_path):
    model = GroupFisherAlgorithm(tiny_classifier(), interval=100, start=5,
                                 input_shape=(3, 8, 8))
    steps = model.min_prune_steps()
    assert steps >= 1
    with pytest.warns(UserWarning, match=f'takes at least {steps} pruning steps'):
        SlimExportHook().before_train(stub_runner(model, tmp_path, 50))
    assert model.schedule_overrun(5 + steps * 100 + 1) is None


def test_exporting_short_of_the_target_warns_with_the_kept_fraction(tmp_path):
    model = ite(start=100)
    with pytest.warns(UserWarning, match=r'keeps 1\.0000 of the dense model.s flops, the '
                      r'target is 0\.5'):
        SlimExportHook().after_train(stub_runner(model, tmp_path, 10))
    assert (tmp_path / 'slim.pth').exists()


def test_a_finished_schedule_exports_without_a_warning(tmp_path, recwarn):
    model = ite(start=0).train()
    data = model.data_preprocessor(digits_batch(4), True)
    model(data['inputs'], data['data_samples'], mode='loss')
    assert model.target_met
    hook = SlimExportHook()
    hook.before_train(stub_runner(model, tmp_path, 10))
    hook.after_train(stub_runner(model, tmp_path, 10))
    assert not [w for w in recwarn if 'pruning' in str(w.message)]


# ---------------------------------------------------------------- resumed with another target
def pruned_by_one_step(model: ItePruneAlgorithm) -> ItePruneAlgorithm:
    data = model.data_preprocessor(digits_batch(4), True)
    model.train()(data['inputs'], data['data_samples'], mode='loss')
    return model


def test_a_run_resumed_past_its_schedule_with_a_lower_target_is_warned_short_of_it(tmp_path):
    saved = pruned_by_one_step(ite(start=0)).state_dict()  # every step taken, at flops 0.5
    kept = float(saved['kept_fraction'])
    assert 0.3 < kept <= 0.5
    lower = ItePruneAlgorithm(tiny_classifier(), input_shape=(3, 8, 8), start=0,
                              pruner=dict(type='ImportancePruner', flops=0.3))
    lower.load_state_dict(saved)
    pruned_by_one_step(lower)  # the schedule is behind: nothing more is pruned
    assert float(lower.kept_fraction) == kept and lower.finished and not lower.target_met
    hook = SlimExportHook()
    with pytest.warns(UserWarning, match=r'every pruning step was taken before iteration 2, '
                      r'where this run goes on \(the last at iteration 0\), but the subnet '
                      f'keeps {kept:.4f} of the dense model.s flops, above the target '
                      r'flops=0\.3 .*set start to 2 or later'):
        hook.before_train(stub_runner(lower, tmp_path, 10))
    with pytest.warns(UserWarning, match=f'keeps {kept:.4f} of the dense model.s flops, the '
                      'target is 0.3'):
        hook.after_train(stub_runner(lower, tmp_path, 10))
    higher = ItePruneAlgorithm(tiny_classifier(), input_shape=(3, 8, 8), start=0,
                               pruner=dict(type='ImportancePruner', flops=0.7))
    higher.load_state_dict(saved)
    assert higher.target_met and higher.schedule_overrun(10) is None


def test_a_ratio_per_group_rounded_above_the_target_meets_it():
    # ratio 0.5 of 8 and 5 channels: 4 and 3 (2.5 rounds up), 7 of 13 channels kept
    model = ItePruneAlgorithm(tiny_classifier((8, 5)), input_shape=(3, 8, 8), start=0,
                              pruner=dict(type='ImportancePruner', ratio=0.5))
    assert not model.target_met
    pruned_by_one_step(model)
    assert float(model.kept_fraction) == pytest.approx(7 / 13)
    assert model.target_met and model.schedule_overrun(10) is None


def test_an_ite_prune_checkpoint_from_before_pruned_to_was_saved_still_loads(tmp_path):
    saved = pruned_by_one_step(ite(start=0)).state_dict()
    old = {key: value for key, value in saved.items() if key != 'pruned_to'}
    fresh = ite(start=0)
    check_fits(fresh, old, tmp_path / 'old.pth')  # what the tools check first
    fresh.load_state_dict(old)  # strict
    assert float(fresh.pruned_to) == 1.0 and fresh.target_met  # by its kept fraction


# ---------------------------------------------------------------- GroupFisher resume
def fisher_model() -> GroupFisherAlgorithm:
    return GroupFisherAlgorithm(tiny_classifier(), interval=3, start=1, input_shape=(3, 8, 8))


def test_group_fisher_resumed_from_a_checkpoint_equals_the_uninterrupted_run():
    batches = [digits_batch(8) for _ in range(1)] * 9

    def steps(model, first, last):
        optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1))
        for batch in batches[first:last]:
            model.train_step(batch, optim)

    torch.manual_seed(0)
    straight = fisher_model().train()
    torch.manual_seed(0)
    interrupted = fisher_model().train()
    steps(straight, 0, 9)
    steps(interrupted, 0, 5)  # the checkpoint is saved after iteration 4's backward
    saved = copy.deepcopy(interrupted.state_dict())
    assert saved['fisher'].abs().sum() > 0 and 'stuck' in saved
    torch.manual_seed(1)
    resumed = fisher_model().train()
    resumed.load_state_dict(saved)
    steps(resumed, 5, 9)
    for key, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key
    assert straight.kept_fraction < 1  # it pruned on the way


def test_group_fisher_saves_whether_pruning_is_stuck():
    model = fisher_model()
    model._stuck = True
    fresh = fisher_model()
    assert not fresh._stuck
    fresh.load_state_dict(model.state_dict())
    assert fresh._stuck and fresh.reached


# ---------------------------------------------------------------- slimming sparsity
@pytest.mark.parametrize('sparsity, error, message', [
    ('1e-4', TypeError, 'sparsity must be a number'),
    (float('inf'), ValueError, 'finite number >= 0'),
    (float('nan'), ValueError, 'got nan'),
    (-1.0, ValueError, 'finite number >= 0'),
])
def test_slimming_refuses_a_sparsity_that_is_no_finite_number(sparsity, error, message):
    with pytest.raises(error, match=message):
        SlimmingAlgorithm(tiny_classifier(), sparsity=sparsity, input_shape=(3, 8, 8))


def test_a_group_fisher_checkpoint_from_before_stuck_was_saved_still_loads(tmp_path):
    old = {key: value for key, value in fisher_model().state_dict().items() if key != 'stuck'}
    fresh = fisher_model()
    check_fits(fresh, old, tmp_path / 'old.pth')  # what the tools check first
    fresh.load_state_dict(old)  # strict
    assert not fresh._stuck
