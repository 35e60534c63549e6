"""AutoSlim: the sandwich rule, in-place distillation, subnet helpers."""
import copy
import random

import pytest
import torch
from mmengine.logging import MessageHub
from mmengine.optim import OptimWrapper

from razorlib.algorithms import AutoSlim
from razorlib.datasets import DigitsDataset
from razorlib.pruning import ChannelConfig


def tiny_autoslim(num_random_samples: int = 2) -> AutoSlim:
    torch.manual_seed(0)
    return AutoSlim(
        architecture=dict(type='ImageClassifier',
                          backbone=dict(type='PlainCNN', channels=(8, 16)),
                          head=dict(type='LinearClsHead', num_classes=10),
                          data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3,
                                                 std=[0.5] * 3)),
        num_random_samples=num_random_samples, input_shape=(3, 8, 8))


@pytest.fixture
def model() -> AutoSlim:
    return tiny_autoslim()


@pytest.fixture
def batch() -> dict:
    dataset = DigitsDataset('train')
    items = [dataset[i] for i in range(16)]
    return dict(inputs=torch.stack([item['inputs'] for item in items]),
                data_samples=[item['data_samples'] for item in items])


@pytest.fixture(autouse=True)
def fresh_message_hub(request):
    """A message hub without a runner's seed, so random subnets depend on the step only."""
    MessageHub.get_instance(f'autoslim_test_{request.node.name}')


def sgd(model: AutoSlim, lr: float = 0.1) -> OptimWrapper:
    return OptimWrapper(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9))


def kept_channels(model: AutoSlim) -> tuple:
    return tuple(int(mask.sum()) for mask in model.current_subnet.values())


def test_train_step_backpropagates_every_pass_and_steps_once(model, batch, monkeypatch):
    optim = sgd(model)
    calls = {'backward': 0, 'step': 0}
    backward, step = optim.backward, optim.optimizer.step
    monkeypatch.setattr(optim, 'backward',
                        lambda loss: (calls.__setitem__('backward', calls['backward'] + 1),
                                      backward(loss)))
    monkeypatch.setattr(optim.optimizer, 'step',
                        lambda: (calls.__setitem__('step', calls['step'] + 1), step()))
    before = copy.deepcopy(model.state_dict())
    log_vars = model.train_step(batch, optim)
    assert calls == {'backward': 4, 'step': 1}
    assert sorted(log_vars) == ['loss', 'loss_max', 'loss_min', 'loss_rand1', 'loss_rand2']
    assert torch.isclose(log_vars['loss'], sum(v for k, v in log_vars.items() if k != 'loss'))
    weight = 'architecture.backbone.stages.0.conv.weight'
    assert not torch.equal(before[weight], model.state_dict()[weight])
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_passes_run_max_then_min_then_random_subnets(model, batch):
    seen = []
    model.architecture.register_forward_pre_hook(lambda *args: seen.append(kept_channels(model)))
    max_width = kept_channels(model)
    model.set_min_subnet()
    min_width = kept_channels(model)
    model.set_max_subnet()
    model.train_step(batch, sgd(model))
    assert seen[0] == max_width and seen[1] == min_width
    assert len(seen) == 4 and len(set(seen)) == 4
    assert all(m <= r <= x for m, r, x in zip(min_width, seen[2], max_width))
    assert kept_channels(model) == max_width  # evaluation sees the max subnet again


def test_max_subnet_loss_is_the_label_loss(model, batch):
    expected_model = copy.deepcopy(model)
    data = expected_model.data_preprocessor(batch, True)
    expected_model._in_train_step = True
    expected = expected_model(data['inputs'], data['data_samples'], mode='loss')['loss']
    assert torch.allclose(model.train_step(batch, sgd(model))['loss_max'], expected)


def test_students_distil_from_the_detached_max_logits(model, batch, monkeypatch):
    calls = []
    distill = model.distill_loss

    def spy(student, teacher):
        calls.append((student, teacher))
        return distill(student, teacher)

    monkeypatch.setattr(model, 'distill_loss', spy)
    max_logits = copy.deepcopy(model).architecture(
        model.data_preprocessor(batch, True)['inputs'])
    model.train_step(batch, sgd(model))
    assert len(calls) == 3
    for student, teacher in calls:
        assert student.requires_grad and not teacher.requires_grad
        assert torch.allclose(teacher, max_logits, atol=1e-5)


def test_distill_loss_is_zero_for_equal_logits_and_positive_otherwise(model):
    logits = torch.randn(4, 10)
    assert model.distill_loss(logits, logits).abs() < 1e-6
    assert model.distill_loss(torch.randn(4, 10), logits) > 0


def test_only_the_max_subnet_updates_batch_norm_statistics(model, batch):
    reference = copy.deepcopy(model)
    reference.architecture(reference.data_preprocessor(batch, True)['inputs'])  # max, train
    model.train_step(batch, sgd(model))
    bn, ref = model.architecture.backbone.stages[1].bn, reference.architecture.backbone.stages[1].bn
    assert torch.allclose(bn.running_mean, ref.running_mean)
    assert torch.allclose(bn.running_var, ref.running_var)
    assert int(bn.num_batches_tracked) == 1


def test_random_subnets_follow_the_step_count_so_replicas_agree(batch):
    def subnets(model):
        seen = []
        model.architecture.register_forward_pre_hook(
            lambda *args: seen.append(kept_channels(model)))
        optim = sgd(model)
        model.train_step(batch, optim)
        model.train_step(batch, optim)
        return seen

    first, second = subnets(tiny_autoslim()), subnets(tiny_autoslim())
    assert first == second
    assert first[2:4] != first[6:8]  # the next step draws other random subnets


def test_step_count_and_masks_are_saved_in_the_state_dict(model, batch):
    model.train_step(batch, sgd(model))
    state = model.state_dict()
    assert int(state['step_count']) == 1
    assert 'architecture.backbone.stages.0.conv.out_mask' in state


def test_a_checkpoint_loads_at_the_max_subnet_whatever_subnet_was_set_when_saved(model):
    """The masks a checkpoint holds are the subnet set when it was saved (here the min
    one, from Python): a loaded supernet is at its max subnet, as between steps."""
    full = kept_channels(model)
    model.set_min_subnet()
    state = model.state_dict()
    assert kept_channels(model) != full
    again = tiny_autoslim()
    again.load_state_dict(state)
    assert kept_channels(again) == full
    assert again.flops_params() == tiny_autoslim().flops_params()


def test_a_loss_forward_outside_train_step_points_to_the_ddp_wrapper(model, batch):
    data = model.data_preprocessor(batch, True)
    with pytest.raises(RuntimeError, match=r"model_wrapper_cfg=dict\(type='razorlib.AutoSlimDDP'"):
        model(data['inputs'], data['data_samples'], mode='loss')


def test_val_step_evaluates_the_current_subnet(model, batch):
    full = [s.pred_score for s in model.val_step(copy.deepcopy(batch))]
    model.set_min_subnet()
    small = [s.pred_score for s in model.val_step(copy.deepcopy(batch))]
    assert len(full) == 16 and not torch.allclose(torch.stack(full), torch.stack(small))


def test_export_and_set_subnet_round_trip_through_a_channel_config(model, tmp_path):
    model.set_subnet(model.sample_subnet(random.Random(0)))
    cfg = model.export_subnet()
    cfg.dump(tmp_path / 'subnet.yaml')
    small = model.flops_params()
    model.set_max_subnet()
    assert model.flops_params().flops > small.flops
    model.set_subnet(tmp_path / 'subnet.yaml')
    assert model.export_subnet() == cfg and model.flops_params() == small


def test_set_subnet_names_the_module_a_foreign_channel_config_gets_wrong(model):
    data = model.export_subnet().to_dict()  # max subnet; now its BN keeps half
    data['modules']['backbone.stages.1.bn'] = dict(out_channels=8, raw_out_channels=16,
                                                   out_index=list(range(8)))
    with pytest.raises(ValueError, match='modules.backbone.stages.1.bn: .* keeps out 8/16'):
        model.set_subnet(ChannelConfig.from_dict(data))


@pytest.mark.parametrize('count, error, message', [
    (-1, ValueError, 'must be at least 0, got -1'),
    (2.0, TypeError, r'must be an integer \(random subnets per step\), got 2.0 \(float\)'),
    (True, TypeError, r'must be an integer \(random subnets per step\), got True \(bool\)'),
    ('2', TypeError, r"must be an integer \(random subnets per step\), got '2' \(str\)"),
])
def test_num_random_samples_must_be_a_whole_number_when_built(count, error, message):
    with pytest.raises(error, match='AutoSlim: num_random_samples ' + message):
        tiny_autoslim(num_random_samples=count)


def test_architecture_without_a_head_is_refused():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3))
    with pytest.raises(TypeError, match='head'):
        AutoSlim(architecture=net, input_shape=(3, 8, 8))


def test_uniform_subnet_matches_a_flops_budget_and_leaves_the_current_subnet(model):
    model.set_subnet(model.sample_subnet(random.Random(1)))
    current = model.current_subnet
    model.set_max_subnet()
    full = model.flops_params().flops
    model.set_subnet(current)
    uniform = model.uniform_subnet(0.4 * full)
    assert all(torch.equal(current[k], v) for k, v in model.current_subnet.items())
    widths = {gid: int(keep.sum()) / keep.numel() for gid, keep in uniform.items()}
    assert max(widths.values()) - min(widths.values()) < 0.25  # one ratio, up to rounding
    model.set_subnet(uniform)
    assert abs(model.flops_params().flops - 0.4 * full) < 0.1 * full


def test_gradient_accumulation_is_refused_not_ignored(batch):
    model = tiny_autoslim()
    accumulating = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1),
                                accumulative_counts=4)
    with pytest.raises(ValueError, match='AutoSlim steps the optimizer itself on every batch: '
                       'optim_wrapper.accumulative_counts must be 1, got 4'):
        model.train_step(batch, accumulating)


def test_counting_flops_leaves_the_global_rng_as_it_was(model):
    """ResourceEstimatorHook calls flops_params while training: a draw from the global RNG
    there changed what was trained."""
    state = torch.get_rng_state()
    first = model.example_inputs()
    model.flops_params()
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(model.example_inputs(), first)
