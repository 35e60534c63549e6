"""recalibrate_bn: averages over the given batches (weighed by samples), same images every
call, state kept."""
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from razorlib.engine.loops import recalibrate_bn
from razorlib.models import ImageClassifier


def make_model():
    torch.manual_seed(0)
    return ImageClassifier(backbone=dict(type='PlainCNN', channels=(4, 8)),
                           head=dict(type='LinearClsHead', num_classes=3)).eval()


def batches(*offsets):
    return [dict(inputs=torch.randn(6, 3, 8, 8) + offset, data_samples=[0] * 6)
            for offset in offsets]


def first_bn_inputs(model, data):
    """What the first BatchNorm sees for each batch (its conv's outputs)."""
    conv = model.backbone.stages[0].conv
    with torch.no_grad():
        return [conv(batch['inputs']) for batch in data]


def test_statistics_are_the_plain_average_over_the_batches_and_state_is_restored():
    model = make_model()
    bn = model.backbone.stages[0].bn
    bn.momentum = 0.3
    data = batches(1.0, -2.0, 5.0)
    used = recalibrate_bn(model, data, num_batches=2)
    assert used == 2
    feats = first_bn_inputs(model, data[:2])
    means = torch.stack([f.mean(dim=(0, 2, 3)) for f in feats])
    variances = torch.stack([f.var(dim=(0, 2, 3), unbiased=True) for f in feats])
    torch.testing.assert_close(bn.running_mean, means.mean(0))
    torch.testing.assert_close(bn.running_var, variances.mean(0))
    assert int(bn.num_batches_tracked) == 2
    assert bn.momentum == 0.3 and not model.training


def test_a_short_batch_weighs_as_its_samples_do():
    # each batch had weighed alike: the 2 images as much as the 6 before them
    model = make_model()
    bn = model.backbone.stages[0].bn
    data = batches(1.0) + [dict(inputs=torch.randn(2, 3, 8, 8) - 4.0, data_samples=[0] * 2)]
    assert recalibrate_bn(model, data, num_batches=2) == 2
    feats = first_bn_inputs(model, data)
    torch.testing.assert_close(bn.running_mean, torch.cat(feats).mean(dim=(0, 2, 3)))
    weights = [f.numel() / f.shape[1] for f in feats]  # each batch's unbiased variance
    torch.testing.assert_close(bn.running_var, sum(
        w * f.var(dim=(0, 2, 3), unbiased=True) for w, f in zip(weights, feats)) / sum(weights))


def test_recalibration_forgets_the_old_statistics():
    model = make_model()
    bn = model.backbone.stages[0].bn
    recalibrate_bn(model, batches(50.0), num_batches=1)
    shifted = bn.running_mean.clone()
    recalibrate_bn(model, batches(0.0), num_batches=1)
    assert (bn.running_mean - shifted).abs().min() > 1


def test_a_shuffled_augmenting_loader_gives_the_same_statistics_every_call():
    dataset = TensorDataset(torch.randn(40, 3, 8, 8), torch.zeros(40, dtype=torch.long))
    loader = DataLoader(dataset, batch_size=8, shuffle=True,
                        collate_fn=lambda items: dict(
                            inputs=torch.stack([x + torch.rand(1) for x, _ in items]),
                            data_samples=[int(y) for _, y in items]))
    model = make_model()
    recalibrate_bn(model, loader, num_batches=2, seed=3)
    first = model.backbone.stages[1].bn.running_var.clone()
    torch.rand(5)  # the global generator moves on; the calibration must not care
    recalibrate_bn(model, loader, num_batches=2, seed=3)
    assert torch.equal(first, model.backbone.stages[1].bn.running_var)
    recalibrate_bn(model, loader, num_batches=2, seed=4)
    assert not torch.equal(first, model.backbone.stages[1].bn.running_var)


def test_zero_batches_leaves_the_statistics_and_an_empty_loader_raises():
    model = make_model()
    before = model.backbone.stages[0].bn.running_mean.clone()
    assert recalibrate_bn(model, batches(3.0), num_batches=0) == 0
    assert torch.equal(before, model.backbone.stages[0].bn.running_mean)
    with pytest.raises(RuntimeError, match='no batches'):
        recalibrate_bn(model, [], num_batches=4)


def test_recalibration_does_not_move_the_global_random_generators():
    model, data = make_model(), batches(0.0)
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    recalibrate_bn(model, data, num_batches=1, seed=7)
    assert torch.equal(torch.rand(3), expected)


class NoisyImages(torch.utils.data.Dataset):
    """Images with noise drawn in the worker: what a random augmentation does."""

    def __len__(self):
        return 32

    def __getitem__(self, index):
        return dict(inputs=torch.full((3, 8, 8), float(index)) + torch.rand(3, 8, 8),
                    data_samples=0)


def test_persistent_workers_repeat_their_augmentations_every_call():
    loader = DataLoader(NoisyImages(), batch_size=8, num_workers=1, persistent_workers=True,
                        collate_fn=lambda items: dict(
                            inputs=torch.stack([item['inputs'] for item in items]),
                            data_samples=[item['data_samples'] for item in items]))
    model = make_model()
    stats = []
    for _ in range(2):
        recalibrate_bn(model, loader, num_batches=2, seed=3)
        stats.append(model.backbone.stages[0].bn.running_mean.clone())
    assert torch.equal(*stats)


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter([torch.tensor([float(i), 1.0]) for i in range(4)])


@pytest.mark.parametrize('make', [
    lambda: DataLoader(Stream(), batch_size=2, num_workers=1, persistent_workers=True),
    lambda: DataLoader([torch.tensor([float(i), 1.0]) for i in range(4)], batch_size=None,
                       num_workers=1, persistent_workers=True),
])
def test_a_restarted_loader_gives_the_batches_the_loader_gives(make):
    # an iterable dataset takes no batch sampler; batch_size=None batches nothing
    from razorlib.engine.loops.bn_calibration import fresh_workers
    loader = make()
    twin = fresh_workers(loader)
    assert not twin.persistent_workers
    assert [batch.tolist() for batch in twin] == [batch.tolist() for batch in loader]
