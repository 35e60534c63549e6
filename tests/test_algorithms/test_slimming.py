"""SlimmingAlgorithm: the L1 penalty on batch-norm scales and its gradient, pruning by
|gamma| at prune_at, no penalty afterwards, the digits config in the Runner and the
ImageNet config."""
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from pruning_helpers import CONFIGS, LinearChain, digits_batch, run_config, tiny_classifier
from razorlib.algorithms import SlimmingAlgorithm
from razorlib.registry import MODELS


def slimming(**kwargs) -> SlimmingAlgorithm:
    torch.manual_seed(0)
    return SlimmingAlgorithm(architecture=tiny_classifier(), input_shape=(3, 16, 16),
                             **kwargs)


def norms(model):
    return [norm for _, norm in model.penalised()]


def test_the_penalty_adds_sparsity_times_the_sign_of_gamma_to_the_scales_gradient():
    model = slimming(sparsity=0.01, prune_at=5).train()
    for norm in norms(model):  # scales of both signs, one exactly zero
        norm.weight.data = torch.linspace(-1, 1, norm.weight.numel())
        norm.weight.data[0] = 0.0
    data = model.data_preprocessor(digits_batch(), True)
    losses = model(data['inputs'], data['data_samples'], mode='loss')
    expected = 0.01 * sum(float(n.weight.detach().abs().sum()) for n in norms(model))
    assert losses['loss_sparsity'].item() == pytest.approx(expected)
    grads_with = torch.autograd.grad(losses['loss'] + losses['loss_sparsity'],
                                     [n.weight for n in norms(model)])
    plain = model.architecture(data['inputs'], data['data_samples'], mode='loss')['loss']
    grads_without = torch.autograd.grad(plain, [n.weight for n in norms(model)])
    for norm, with_, without in zip(norms(model), grads_with, grads_without):
        assert torch.allclose(with_ - without, 0.01 * torch.sign(norm.weight), atol=1e-6)


def test_it_prunes_the_smallest_scales_across_layers_then_stops_the_penalty():
    model = slimming(pruner=dict(type='ImportancePruner', ratio=0.5, global_ranking=True,
                                 importance=dict(type='bn_scale', normalize='none')),
                     sparsity=1e-3, prune_at=2).train()
    small, large = norms(model)
    small.weight.data = torch.arange(1.0, 9.0) / 100  # 0.01 ... 0.08: all below the others
    large.weight.data = -torch.arange(1.0, 17.0)  # |gamma| 1 ... 16
    data = model.data_preprocessor(digits_batch(), True)
    for _ in range(2):
        assert 'loss_sparsity' in model(data['inputs'], data['data_samples'], mode='loss')
    assert all(keep.all() for keep in model.current_subnet.values())
    losses = model(data['inputs'], data['data_samples'], mode='loss')  # iteration 2: prune
    assert losses['loss_sparsity'].item() == 0  # logged as 0 after the step, not dropped
    # 12 of the 24 channels by |gamma| over both layers: stage 0 keeps one channel (every
    # layer does), its largest scale, and stage 1 its 11 largest, 6 ... 16
    kept = model.current_subnet
    assert kept['backbone.stages.1.conv'].tolist() == [False] * 5 + [True] * 11
    assert kept['backbone.stages.0.conv'].tolist() == [False] * 7 + [True]


def test_an_architecture_without_prunable_norms_is_refused():
    with pytest.raises(ValueError, match='no prunable group holds an affine norm'):
        SlimmingAlgorithm(architecture=LinearChain(), input_shape=(2, ), prune_at=5)


def test_a_bad_prune_at_is_named_as_the_config_names_it():
    with pytest.raises(ValueError, match='SlimmingAlgorithm: prune_at must be an integer >= 0, '
                       'got -3'):
        slimming(prune_at=-3)


def test_a_penalty_with_pruning_at_iteration_0_is_refused():
    # the old defaults (sparsity 1e-4, prune_at 0) pruned at iteration 0 by the initial
    # scales, all 1: a tie broken arbitrarily, and loss_sparsity was 0 ever after
    with pytest.raises(ValueError, match=r'SlimmingAlgorithm: sparsity=0\.0001 with prune_at=0 '
                       r'prunes at iteration 0, before the L1 penalty .* Set prune_at to the '
                       r'iterations of sparsity training'):
        slimming(prune_at=0)
    with pytest.raises(ValueError, match='SlimmingAlgorithm needs prune_at: the iterations of '
                                         'sparsity training'):
        slimming()


def test_without_a_penalty_it_prunes_at_iteration_0_by_the_scales_as_they_are():
    pruner = dict(type='ImportancePruner', ratio=0.5, importance=dict(type='bn_scale'))
    model = slimming(sparsity=0, prune_at=0, pruner=pruner).train()
    small, large = norms(model)
    small.weight.data = torch.arange(1.0, 9.0)  # keeps 5 ... 8
    large.weight.data = -torch.arange(16.0, 0.0, -1)  # |gamma| 16 ... 1: keeps the first 8
    data = model.data_preprocessor(digits_batch(), True)
    losses = model(data['inputs'], data['data_samples'], mode='loss')
    assert 'loss_sparsity' not in losses
    assert model.current_subnet['backbone.stages.0.conv'].tolist() == [False] * 4 + [True] * 4
    assert model.current_subnet['backbone.stages.1.conv'].tolist() == [True] * 8 + [False] * 8


def test_the_digits_config_trains_sparse_then_prunes_in_the_runner(tmp_path):
    runner = run_config('slimming/slimming_plaincnn_digits.py', tmp_path, {
        'model.prune_at': 3, 'model.architecture.backbone.channels': [8, 16, 16, 32]})
    model = runner.model
    assert model.finished and float(model.kept_fraction) <= 0.5
    assert (tmp_path / 'slim.yaml').is_file() and (tmp_path / 'slim.pth').is_file()


def test_the_imagenet_config_builds():
    init_default_scope('razorlib')
    model = MODELS.build(Config.fromfile(
        CONFIGS / 'slimming' / 'slimming_resnet50_imagenet.py').model)
    assert model.sparsity == 1e-5 and model.target == ('flops', 0.5)
    assert len(model.penalised()) > 30


def test_a_prelus_slopes_are_not_penalised():
    # the PReLU's slopes follow the conv's channels as the norm's scales do
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
                              torch.nn.PReLU(8), torch.nn.Conv2d(8, 4, 1))
    model = SlimmingAlgorithm(architecture=net, input_shape=(3, 8, 8), sparsity=0.01,
                              prune_at=5)
    assert [name for name, _ in model.penalised()] == ['1']
