"""GroupFisherAlgorithm: Fisher accumulated in training steps (by hand, and against the
'fisher' criterion), the pruning decision per unit of cost, group steps, the target,
the digits config in the Runner and the ImageNet config."""
import warnings
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmengine.optim.optimizer import amp_optimizer_wrapper
from mmengine.registry import init_default_scope

from pruning_helpers import CONFIGS, LinearChain, run_config
from razorlib.algorithms import GroupFisherAlgorithm, sub_model
from razorlib.registry import MODELS


def chain_fisher(normalize_by=None, **kwargs) -> GroupFisherAlgorithm:
    pruner = dict(type='ImportancePruner', ratio=0.5,
                  importance=dict(type='fisher', normalize_by=normalize_by))
    return GroupFisherAlgorithm(LinearChain(), pruner={**pruner, **kwargs.pop('pruner', {})},
                                input_shape=(2, ), **kwargs)


def batches(count: int = 2):
    torch.manual_seed(1)
    return [dict(inputs=torch.randn(5, 2), data_samples=torch.randn(5, 1))
            for _ in range(count)]


def by_hand(model: LinearChain, inputs: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """Fisher of fc1's output channels, read at fc2's input: per sample
    ``f_nc = a_nc * dL/da_nc`` with ``dL/da_n = (y_n - t_n) * (w3 W2)``, summed as
    ``sum_n f_nc**2 / 2``."""
    with torch.no_grad():
        a = model.fc1(inputs)
        residual = model.fc3(model.fc2(a)) - targets  # (N, 1)
        grad = residual * (model.fc3.weight @ model.fc2.weight)  # (N, 3)
    return ((a * grad)**2).sum(0).numpy() / 2


def test_fisher_accumulates_over_training_steps_as_computed_by_hand():
    model = chain_fisher(interval=100)
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.0))  # weights stay put
    data = batches(2)
    for batch in data:  # each backward adds its Fisher at once (no step later)
        model.train_step(batch, optim)
    fc1, fc2 = model.fisher_sums()
    expected = sum(by_hand(model.architecture, b['inputs'], b['data_samples']) for b in data)
    assert np.allclose(fc1.numpy(), expected, rtol=1e-5)
    assert fc2.shape == (4, ) and (fc2 > 0).all()


def test_fisher_accumulated_in_training_equals_the_fisher_criterion():
    model = chain_fisher(interval=100)
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.0))
    data = batches(2)
    for batch in data:
        model.train_step(batch, optim)
    scores = model.pruner.score(
        data=[(b['inputs'], b['data_samples']) for b in data],
        loss_fn=lambda out, t: ((out - t)**2).sum() / 2)
    accumulated = model.fisher_sums()
    for index, gid in enumerate(model.pruner.groups.prunable):
        assert np.allclose(accumulated[index].numpy(), scores[gid], rtol=1e-5)


@pytest.mark.parametrize('normalize_by, pruned', [(None, 'fc2'), ('flops', 'fc1')])
def test_the_step_with_least_fisher_per_unit_of_cost_is_pruned(normalize_by, pruned):
    # a channel of fc1 costs 2 + 4 = 6 MACs (its row of fc1, its column of fc2), one of
    # fc2 3 + 1 = 4: per channel fc2's 0.9 beats fc1's 1.0, per MAC fc1's 1/6 beats 0.9/4
    model = chain_fisher(normalize_by)
    model.fisher.copy_(torch.tensor([1.0, 5, 5, 0.9, 9, 9, 9], dtype=torch.float64))
    found = {gid: value for value, gid, _ in model.candidates(
        [f.numpy() for f in model.fisher_sums()], torch.randn(1, 2))}
    cost = 1 if normalize_by is None else np.array([6, 4])
    assert np.allclose([found['fc1'], found['fc2']], np.array([1.0, 0.9]) / cost)
    assert model.prune_step(torch.randn(1, 2)) == pruned
    keep = model.current_subnet[pruned]
    assert keep.sum() == keep.numel() - 1 and not keep[0]  # its least-Fisher channel
    assert not model.fisher.any()  # a new interval starts


def test_with_round_to_a_group_steps_to_its_next_allowed_width():
    model = chain_fisher(pruner=dict(round_to=2))
    model.fisher.copy_(torch.tensor([9.0, 9, 9, 3, 1, 2, 4], dtype=torch.float64))
    assert model.prune_step(torch.randn(1, 2)) == 'fc2'
    assert model.current_subnet['fc2'].tolist() == [True, False, False, True]
    # fc1 (3 channels) may only stay whole or go to 2: a step of one channel
    assert model.prune_step(torch.randn(1, 2)) == 'fc1'


def test_pruning_runs_every_interval_after_start_and_stops_at_the_target():
    model = chain_fisher(interval=2, start=1)  # ratio 0.5: 3 of the 7 channels stay
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.01))
    batch = batches(1)[0]
    history = []
    for _ in range(12):
        model.train_step(batch, optim)
        history.append(int(model.kept_channels.sum()))
    # accumulation from iteration 1; decisions at iterations 3, 5, 7, 9; then fine-tuning
    assert history == [7, 7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 3]
    assert model.reached and float(model.kept_fraction) <= 0.5


def test_a_checkpoint_pruned_to_another_target_metric_is_measured_in_this_ones():
    # flops=0.5 kept 4 of the 7 channels, 0.364 of the FLOPs; resumed with ratio=0.5
    # that is 4/7 of the channels, above the target: not reached, so pruning goes on
    pruned = chain_fisher(interval=2, start=1, pruner=dict(ratio=None, flops=0.5))
    optim = OptimWrapper(torch.optim.SGD(pruned.parameters(), lr=0.01))
    for batch in batches(1) * 12:
        pruned.train_step(batch, optim)
    assert pruned.reached and float(pruned.kept_fraction) == pytest.approx(4 / 11)
    resumed = chain_fisher(interval=2, start=1)
    resumed.load_state_dict(pruned.state_dict())
    assert float(resumed.kept_fraction) == pytest.approx(4 / 7)
    assert not resumed.reached and not resumed.target_met
    optim = OptimWrapper(torch.optim.SGD(resumed.parameters(), lr=0.01))
    for batch in batches(1) * 2:  # iterations 12 and 13: a decision at 13
        resumed.train_step(batch, optim)
    assert int(resumed.kept_channels.sum()) == 3 and resumed.reached


def test_the_pruner_must_score_by_fisher():
    with pytest.raises(TypeError, match="importance must be dict\\(type='fisher'"):
        GroupFisherAlgorithm(LinearChain(), pruner=dict(type='ImportancePruner'),
                             input_shape=(2, ))


@pytest.mark.parametrize('option, value', [('interval', None), ('start', None),
                                           ('interval', float('nan')), ('start', float('inf')),
                                           ('interval', True), ('interval', '5')])
def test_a_schedule_option_that_is_no_whole_number_is_named(option, value):
    # None failed inside int(), NaN and infinity in its conversion, naming no option;
    # True passed for 1
    least = 0 if option == 'start' else 1
    with pytest.raises(ValueError, match=f'^GroupFisherAlgorithm: {option} must be an integer '
                       f'>= {least}, got {value!r}$'):
        chain_fisher(**{option: value})


def test_the_digits_config_prunes_in_the_runner(tmp_path):
    runner = run_config('group_fisher/group_fisher_plaincnn_digits.py', tmp_path, {
        'model.start': 0, 'model.interval': 1, 'model.pruner.flops': 0.9,
        'model.architecture.backbone.channels': [8, 16, 16, 32]})
    model = runner.model
    assert model.reached and float(model.kept_fraction) <= 0.9
    assert sum(int(k.sum()) for k in model.current_subnet.values()) < 8 + 16 + 16 + 32
    slim = sub_model(Config.fromfile(CONFIGS / 'group_fisher' /
                                     'group_fisher_plaincnn_digits.py').model.architecture
                     | {'backbone': dict(type='PlainCNN', channels=(8, 16, 16, 32))},
                     tmp_path / 'slim.yaml')
    slim.load_state_dict(torch.load(tmp_path / 'slim.pth'))


def test_the_imagenet_config_builds():
    init_default_scope('razorlib')
    model = MODELS.build(Config.fromfile(
        CONFIGS / 'group_fisher' / 'group_fisher_resnet50_imagenet.py').model)
    assert model.target == ('flops', 0.5) and model.interval == 25
    assert model.pruner.importance.normalize_by == 'flops'
    assert len(model.recorder.points) > 30


class CpuAmpOptimWrapper(AmpOptimWrapper):
    """mmengine's ``AmpOptimWrapper`` on the CPU, as it runs on a GPU: its backward of the
    loss times the scaler's scale, its step skipped (and the scale halved) when the
    gradients overflow; a CPU ``GradScaler`` and, with ``fp16``, float16 autocast stand
    in for CUDA's."""

    def __init__(self, model: torch.nn.Module, fp16: bool, scale: float = 65536.0):
        super().__init__(optimizer=torch.optim.SGD(model.parameters(), lr=0.0))
        self.loss_scaler = torch.amp.GradScaler('cpu', init_scale=scale)
        self.fp16 = fp16

    @contextmanager
    def optim_context(self, model: torch.nn.Module):
        with OptimWrapper.optim_context(self, model), \
                torch.autocast('cpu', dtype=torch.float16, enabled=self.fp16):
            yield


@pytest.fixture
def amp(monkeypatch):
    """Build :class:`CpuAmpOptimWrapper`s (``AmpOptimWrapper`` refuses a machine
    without CUDA)."""
    monkeypatch.setattr(amp_optimizer_wrapper, 'is_cuda_available', lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # CUDA's GradScaler, replaced, warns on the CPU
        yield CpuAmpOptimWrapper


def plain_fisher(data) -> torch.Tensor:
    model = chain_fisher(interval=100)
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.0))
    for batch in data:
        model.train_step(batch, optim)
    return model.fisher


@pytest.mark.parametrize('wrapper', ['amp', 'accumulation'])
def test_the_fisher_is_the_losses_whatever_the_backward_scales_them_by(amp, wrapper):
    # AMP backwards the loss times 65536, gradient accumulation the loss over 4: the
    # Fisher, a sum of squared gradients, was 65536**2 (4.3e9) times, or 1/16 of, the
    # loss's own
    model = chain_fisher(interval=100)
    optim = (amp(model, fp16=False) if wrapper == 'amp' else OptimWrapper(
        torch.optim.SGD(model.parameters(), lr=0.0), accumulative_counts=4))
    data = batches(2)
    for batch in data:
        model.train_step(batch, optim)
    assert torch.allclose(model.fisher, plain_fisher(data), rtol=1e-6)


def test_an_amp_step_whose_gate_gradients_overflow_adds_no_fisher(amp, monkeypatch):
    # in float16 the gates' gradients times 65536 overflow: the scaler skips the step
    # and halves its scale, and the step's Fisher (inf and NaN) is not accumulated
    model = chain_fisher(interval=100)
    optim = amp(model, fp16=True)
    batch = batches(1)[0]
    logged = []
    monkeypatch.setattr(MMLogger.get_current_instance(), 'warning', logged.append)
    model.train_step(batch, optim)
    assert optim.loss_scaler.get_scale() == 32768.0  # the scaler found an overflow
    assert torch.equal(model.fisher, torch.zeros(7, dtype=torch.float64))
    assert logged == ["GroupFisherAlgorithm: iteration 0: the channel gates' gradients are "
                      'not finite (an AMP step whose gradients overflowed, which the loss '
                      'scaler skips too); its Fisher is not accumulated']
    model.train_step(batch, optim)  # at 32768 nothing overflows: the loss's own Fisher
    assert optim.loss_scaler.get_scale() == 32768.0 and len(logged) == 1
    assert torch.allclose(model.fisher, plain_fisher([batch]), rtol=1e-2)


def test_a_backward_that_scales_the_losses_unknowably_is_refused():
    model = chain_fisher(interval=100).train()
    inputs, targets = batches(1)[0].values()
    with model.recorder.gating(model.add_fisher):
        out = model.architecture(inputs)
    with pytest.raises(RuntimeError, match="reached the channel gates but none of the losses "
                       r"the model returned \(those named 'loss...'\)"):
        ((out - targets)**2).sum().backward()
    with model.recorder.gating(model.add_fisher) as watched:
        losses = watched(dict(loss_a=model.architecture(inputs, targets, 'loss')['loss'],
                              loss_b=model.architecture(inputs, targets, 'loss')['loss']))
    with pytest.raises(RuntimeError, match=r'weighed the losses unlike \((1, 2|2, 1)\), so no one '
                       'loss scale can be divided out'):
        (losses['loss_a'] + 2 * losses['loss_b']).backward()
    assert not model.fisher.any()
