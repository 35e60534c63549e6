"""ItePruneAlgorithm: the schedule, pruning steps in training, resume, the digits config
in tools/train.py and the slim model it exports."""
import importlib.util

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.optim import OptimWrapper
from mmengine.registry import init_default_scope
from mmengine.runner.checkpoint import load_state_dict

from pruning_helpers import CONFIGS, REPO, digits_batch, tiny_classifier
from razorlib.algorithms import ItePruneAlgorithm, sub_model
from razorlib.registry import MODELS


def ite_prune(**kwargs) -> ItePruneAlgorithm:
    torch.manual_seed(0)
    options = dict(pruner=dict(type='ImportancePruner', ratio=0.5), step_freq=2,
                   prune_times=2, input_shape=(3, 16, 16))
    return ItePruneAlgorithm(architecture=tiny_classifier(), **{**options, **kwargs})


def kept(model) -> tuple:
    return tuple(int(keep.sum()) for keep in model.current_subnet.values())


def train(model, steps: int, lr: float = 0.1) -> list:
    """Kept channels after each of ``steps`` train steps."""
    batch, optim = digits_batch(), OptimWrapper(torch.optim.SGD(model.parameters(), lr=lr))
    model.train()
    seen = []
    for _ in range(steps):
        model.train_step(batch, optim)
        seen.append(kept(model))
    return seen


def test_the_schedule_steps_linearly_to_the_target():
    model = ite_prune(pruner=dict(type='ImportancePruner', flops=0.4), step_freq=10,
                      prune_times=3, start=5)
    assert model.target == ('flops', 0.4)
    iterations, fractions = zip(*model.schedule())
    assert iterations == (5, 15, 25)
    assert np.allclose(fractions, [0.8, 0.6, 0.4])


def test_steps_prune_on_schedule():
    model = ite_prune(pruner=dict(type='ImportancePruner', ratio=0.5), step_freq=2,
                      prune_times=2, start=1)
    # dense before iteration 1; 3/4 of each group at iteration 1, half at iteration 3
    assert train(model, 5) == [(8, 16), (6, 12), (6, 12), (4, 8), (4, 8)]
    assert model.finished and float(model.kept_fraction) == pytest.approx(0.5)


def test_pruned_channels_stay_pruned_whatever_their_weights_become():
    model = ite_prune(step_freq=1, prune_times=2)
    train(model, 1, lr=0.0)
    first = model.current_subnet
    conv = model.architecture.backbone.stages[0].conv
    with torch.no_grad():  # the pruned filters now have the largest L1 norms
        conv.weight[~first['backbone.stages.0.conv']] *= 100
    train(model, 1, lr=0.0)
    for gid, keep in model.current_subnet.items():
        assert keep.sum() < first[gid].sum() and not (keep & ~first[gid]).any()


def test_a_global_ranking_with_round_to_never_gives_back_a_pruned_channel():
    """A global ranking with round_to may widen one group while it cuts another deeper
    (8, 8, 8 -> 4, 8, 12 at a smaller budget): the pruned channels stay pruned, the step
    lands under its budget, and its allocation reports what the kept subnet costs."""
    torch.manual_seed(8)
    model = ItePruneAlgorithm(
        architecture=dict(type='ImageClassifier',
                          backbone=dict(type='PlainCNN', channels=(8, 12, 16)),
                          head=dict(type='LinearClsHead', num_classes=10)),
        pruner=dict(type='ImportancePruner', importance='l1', global_ranking=True,
                    round_to=4, flops=0.3),
        step_freq=1, prune_times=8, input_shape=(3, 8, 8))
    allocations, prune_to = [], model.prune_to
    model.prune_to = lambda *args: allocations.append(prune_to(*args)) or allocations[-1]
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=1.0))
    budgets = dict(model.schedule())
    model.train()
    generator = torch.Generator().manual_seed(0)
    before = model.current_subnet
    for step in range(8):
        inputs = torch.randn(6, 3, 8, 8, generator=generator)
        samples = digits_batch()['data_samples'][:6]
        model.train_step(dict(inputs=inputs, data_samples=samples), optim)
        now = model.current_subnet
        assert not any((now[gid] & ~before[gid]).any() for gid in now), step
        assert float(model.kept_fraction) <= budgets[step] + 1e-6
        assert allocations[-1].fraction('flops') == pytest.approx(float(model.kept_fraction))
        before = now


def test_a_criterion_computed_from_data_scores_on_the_training_batch():
    model = ite_prune(pruner=dict(type='ImportancePruner', importance='taylor', flops=0.5),
                      step_freq=1, prune_times=1)
    train(model, 1, lr=0.0)
    assert 0 < float(model.kept_fraction) <= 0.5
    assert model.pruner.group_scores() is not None  # the Taylor scores of that batch


def test_a_checkpoint_restores_the_pruned_subnet():
    model = ite_prune()
    train(model, 3)
    resumed = ite_prune()
    assert kept(resumed) == (8, 16)
    load_state_dict(resumed, model.state_dict())  # as the Runner's resume loads it
    assert kept(resumed) == kept(model) == (4, 8)
    assert int(resumed.step_count) == 3 and resumed.finished
    assert resumed.export_subnet() == model.export_subnet()


def test_a_checkpoint_pruned_to_another_target_metric_is_measured_in_this_ones():
    # flops=0.5 kept 15 of the 24 channels (0.494 of the FLOPs, step budget 0.5): with
    # ratio=0.5 that is 0.625 of the channels, short of the target, and the step budget,
    # in FLOPs, says nothing of it
    pruned = ite_prune(pruner=dict(type='ImportancePruner', flops=0.5))
    train(pruned, 3)
    assert kept(pruned) == (5, 10) and pruned.target_met
    resumed = ite_prune()
    resumed.load_state_dict(pruned.state_dict())
    assert kept(resumed) == (5, 10) and float(resumed.kept_fraction) == 0.625
    assert float(resumed.pruned_to) == 1.0 and not resumed.target_met
    # another budget in the same metric keeps the step budget (it is warned about)
    lower = ite_prune(pruner=dict(type='ImportancePruner', flops=0.3))
    lower.load_state_dict(pruned.state_dict())
    assert float(lower.kept_fraction) == float(pruned.kept_fraction)
    assert float(lower.pruned_to) == 0.5


def test_a_pruner_without_an_importance_criterion_is_refused():
    with pytest.raises(TypeError, match='must be an ImportancePruner, got RatioPruner'):
        ite_prune(pruner=dict(type='RatioPruner'))
    with pytest.raises(ValueError, match='step_freq must be an integer >= 1'):
        ite_prune(step_freq=0)


@pytest.mark.parametrize('option, value', [('step_freq', None), ('prune_times', '3'),
                                           ('start', True), ('step_freq', 1.5),
                                           ('prune_times', float('inf')),
                                           ('start', float('nan'))])
def test_a_schedule_option_that_is_no_whole_number_is_named(option, value):
    # None and '3' failed inside int(), naming no option, and infinity and NaN in its
    # conversion; True passed for 1
    least = 0 if option == 'start' else 1
    with pytest.raises(ValueError, match=f'ItePruneAlgorithm: {option} must be an integer >= '
                       f'{least}, got {value!r}'):
        ite_prune(**{option: value})


def load_train_tool():
    spec = importlib.util.spec_from_file_location('train_tool', REPO / 'tools' / 'train.py')
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_digits_config_prunes_in_tools_train_and_its_slim_model_deploys(tmp_path):
    config = CONFIGS / 'ite_prune' / 'ite_prune_plaincnn_digits.py'
    code = load_train_tool().main([
        str(config), '--work-dir', str(tmp_path), '--cfg-options',
        'train_dataloader.batch_size=256', 'train_cfg.max_epochs=1', 'train_cfg.val_interval=1',
        'model.start=1', 'model.step_freq=2', 'model.prune_times=2',
        'model.architecture.backbone.channels=[8,16,16,32]', 'experiment_name=ite_digits'])
    assert code == 0
    checkpoint = torch.load(tmp_path / 'epoch_1.pth')  # weights only: globals allow-listed
    assert int(checkpoint['state_dict']['step_count']) == 6
    cfg = Config.fromfile(config)
    cfg.merge_from_dict({'model.architecture.backbone.channels': [8, 16, 16, 32]})
    init_default_scope('razorlib')
    pruned = MODELS.build(cfg.model)
    pruned.load_state_dict(checkpoint['state_dict'])
    assert float(pruned.kept_fraction) <= 0.5  # the FLOPs target, reached at iteration 3
    slim = sub_model(cfg.model.architecture, tmp_path / 'slim.yaml')
    slim.load_state_dict(torch.load(tmp_path / 'slim.pth'))  # strict: every tensor fits
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        assert torch.allclose(slim.eval()(x), pruned.eval()(x), atol=1e-5)
    assert sum(p.numel() for p in slim.parameters()) == pruned.flops_params().params


def test_the_imagenet_config_builds():
    init_default_scope('razorlib')
    model = MODELS.build(Config.fromfile(
        CONFIGS / 'ite_prune' / 'ite_prune_resnet50_imagenet.py').model)
    assert model.target == ('flops', 0.5) and model.pruner.rule.round_to == 8
    assert len(model.schedule()) == 10 and len(model.pruner.groups.prunable) > 30


def test_a_pruning_step_leaves_the_global_rng_as_it_was():
    # tracing, FLOPs counting and allocation run example_inputs(): a generator of their
    # own, or a pruning step would shift every later augmentation and dropout draw
    model = ite_prune(step_freq=1, prune_times=1, start=0)
    state = torch.get_rng_state()
    train(model, 1, lr=0.0)
    assert kept(model) == (4, 8)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(model.example_inputs(), model.example_inputs())
