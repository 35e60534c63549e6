"""DigitsDataset: deterministic disjoint splits, shapes, scaling and batching."""
import pytest
import torch
from mmengine.dataset import default_collate, pseudo_collate

from razorlib.datasets import DigitsDataset, RandomShift
from razorlib.models import ClsDataPreprocessor, ClsDataSample
from razorlib.registry import DATASETS


def test_splits_are_disjoint_complete_and_deterministic():
    train, val = DigitsDataset('train'), DigitsDataset('val')
    assert (len(train), len(val)) == (1437, 360)
    assert not set(train.indices) & set(val.indices)
    assert sorted([*train.indices, *val.indices]) == list(range(1797))
    again = DigitsDataset('train')
    assert (train.indices == again.indices).all()
    assert torch.equal(train.images, again.images)
    other_seed = DigitsDataset('train', seed=1)
    assert set(other_seed.indices) != set(train.indices)


def test_a_test_split_is_held_out_deterministically_and_stratified():
    splits = {s: DigitsDataset(s, test_ratio=0.2) for s in ('train', 'val', 'test')}
    assert [len(d) for d in splits.values()] == [1077, 360, 360]
    indices = [set(d.indices) for d in splits.values()]
    assert set.union(*indices) == set(range(1797)) and sum(map(len, indices)) == 1797
    again = DigitsDataset('test', test_ratio=0.2)
    assert (again.indices == splits['test'].indices).all()
    counts = torch.bincount(torch.tensor(splits['test'].labels), minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37


def test_test_ratio_zero_leaves_train_and_val_as_they_were():
    for split in ('train', 'val'):
        plain, zero = DigitsDataset(split), DigitsDataset(split, test_ratio=0.0)
        assert (plain.indices == zero.indices).all()


def test_split_is_stratified():
    val = DigitsDataset('val')
    counts = torch.bincount(torch.tensor(val.labels), minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37


def test_items_are_scaled_images_with_labels():
    dataset = DigitsDataset('val', in_channels=1)
    item = dataset[5]
    assert item['inputs'].shape == (1, 8, 8) and item['inputs'].dtype == torch.float32
    assert 0 <= dataset.images.min() and dataset.images.max() == 1
    assert isinstance(item['data_samples'], ClsDataSample)
    assert item['data_samples'].gt_label.item() == dataset.labels[5]
    assert item['data_samples'].sample_idx == 5
    assert dataset.metainfo == dict(classes=tuple('0123456789'))


def test_rgb_and_upscale():
    gray = DigitsDataset('val', in_channels=1)
    rgb = DigitsDataset('val', upscale=16)
    image = rgb[0]['inputs']
    assert image.shape == (3, 16, 16)
    assert torch.equal(image[0], image[2])
    # nearest upscaling by 2 repeats each pixel as a 2x2 block
    assert torch.equal(image[0, ::2, ::2], gray[0]['inputs'][0])
    smooth = DigitsDataset('val', upscale=16, upscale_mode='bilinear')[0]['inputs']
    assert not torch.equal(smooth, image)


def test_bicubic_upscaling_stays_in_0_1():
    # bicubic overshoots the strokes' edges (to -0.25 and 1.23); the datasets yield [0, 1]
    images = DigitsDataset('val', in_channels=1, upscale=32, upscale_mode='bicubic').images
    assert images.min() == 0 and images.max() == 1
    plain = DigitsDataset('val', in_channels=1).images
    expected = torch.nn.functional.interpolate(plain, size=(32, 32), mode='bicubic')
    assert torch.equal(images, expected.clamp(0, 1))


def test_augment_shifts_train_images_by_at_most_one_pixel():
    torch.manual_seed(0)
    plain = DigitsDataset('train', in_channels=1)
    augmented = DigitsDataset('train', in_channels=1, augment=True)
    assert isinstance(augmented.transforms[0], RandomShift)
    original = plain[3]['inputs'][0]
    shifted = [augmented[3]['inputs'][0] for _ in range(20)]
    assert any(not torch.equal(s, original) for s in shifted)
    padded = torch.nn.functional.pad(original, (1, 1, 1, 1))
    windows = {(dy, dx): padded[dy:dy + 8, dx:dx + 8] for dy in range(3) for dx in range(3)}
    assert all(any(torch.equal(s, w) for w in windows.values()) for s in shifted)


def test_both_collates_feed_the_preprocessor():
    dataset = DigitsDataset('val')
    items = [dataset[i] for i in range(4)]
    pre = ClsDataPreprocessor(mean=[0.5] * 3, std=[0.5] * 3)
    outs = [pre(collate(items)) for collate in (pseudo_collate, default_collate)]
    for out in outs:
        assert out['inputs'].shape == (4, 3, 8, 8)
        assert [s.gt_label.item() for s in out['data_samples']] == dataset.labels[:4]
    assert torch.equal(outs[0]['inputs'], outs[1]['inputs'])


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='split must be one of'):
        DigitsDataset('tset')
    with pytest.raises(ValueError, match="split 'test' needs test_ratio > 0"):
        DigitsDataset('test')
    with pytest.raises(ValueError, match='must leave images for training'):
        DigitsDataset('train', val_ratio=0.5, test_ratio=0.5)
    with pytest.raises(ValueError, match='in_channels'):
        DigitsDataset(in_channels=2)


def test_build_from_registry():
    dataset = DATASETS.build(dict(type='DigitsDataset', split='val', in_channels=1,
                                  transforms=[dict(type='RandomFlip', prob=1.0)]))
    flipped = dataset[0]['inputs']
    assert torch.equal(flipped, dataset.images[0].flip(-1))


def test_an_in_place_transform_does_not_change_the_stored_image():
    dataset = DigitsDataset('val', in_channels=1, transforms=[lambda image: image.mul_(2)])
    stored = dataset.images[0].clone()
    assert torch.equal(dataset[0]['inputs'], 2 * stored)
    assert torch.equal(dataset[0]['inputs'], 2 * stored)  # compounded to 4x before
    assert torch.equal(dataset.images[0], stored)


@pytest.mark.parametrize('val_ratio, test_ratio', [(0.0, 0.2), (-0.1, 0.3), (1.0, 0.0)])
def test_a_val_ratio_outside_0_1_is_refused_by_name(val_ratio, test_ratio):
    with pytest.raises(ValueError, match=f'val_ratio must be between 0 and 1 .*{val_ratio}'):
        DigitsDataset('val', val_ratio=val_ratio, test_ratio=test_ratio)


@pytest.mark.parametrize('val_ratio, test_ratio, sizes', [
    (0.2, 0.0, (1437, 360, 0)), (0.2, 0.2, (1077, 360, 360)),
    (0.3, 0.2, (898, 539, 360)),  # val one below ceil(0.3 * 1797) = 540: see docs
    (0.25, 0.25, (898, 449, 450))])
def test_split_sizes_follow_the_documented_rule(val_ratio, test_ratio, sizes):
    import math
    n_test = math.ceil(test_ratio * 1797)
    n_val = math.ceil(val_ratio / (1 - test_ratio) * (1797 - n_test))
    assert sizes == (1797 - n_val - n_test, n_val, n_test)
    splits = ('train', 'val', 'test') if test_ratio else ('train', 'val')
    assert tuple(len(DigitsDataset(s, val_ratio=val_ratio, test_ratio=test_ratio))
                 for s in splits) == sizes[:len(splits)]


def test_the_plain_and_the_nas_splits_overlap():
    # why configs must not mix test_ratio=0 and test_ratio=0.2 datasets (docs/datasets.md)
    plain_train, plain_val = DigitsDataset('train'), DigitsDataset('val')
    nas_val, nas_test = (DigitsDataset(s, test_ratio=0.2) for s in ('val', 'test'))
    assert (plain_val.indices == nas_test.indices).all()
    assert set(nas_val.indices) <= set(plain_train.indices)
