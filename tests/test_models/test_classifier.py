"""ImageClassifier with its preprocessor, neck, head and data samples."""
import numpy as np
import pytest
import torch
from mmengine.optim import OptimWrapper

import razorlib
from razorlib.models import (ClsDataPreprocessor, ClsDataSample, GlobalAveragePooling,
                             ImageClassifier, LinearClsHead, PlainCNN)
from razorlib.registry import MODELS


def tiny_classifier(**kwargs) -> ImageClassifier:
    cfg = dict(type='ImageClassifier',
               backbone=dict(type='PlainCNN', channels=(4, 8)),
               head=dict(type='LinearClsHead', num_classes=3))
    cfg.update(kwargs)
    return MODELS.build(cfg)


def batch(n: int = 4, channels: int = 3, size: int = 8) -> dict:
    """What pseudo_collate gives for ``n`` dataset items."""
    return dict(inputs=[torch.rand(channels, size, size) for _ in range(n)],
                data_samples=[ClsDataSample(gt_label=i % 3) for i in range(n)])


def test_build_from_config_fills_head_in_channels():
    model = MODELS.build(dict(type='ImageClassifier',
                              backbone=dict(type='ResNet', depth=18, stem='cifar'),
                              head=dict(type='LinearClsHead', num_classes=10)))
    assert isinstance(model.neck, GlobalAveragePooling)
    assert isinstance(model.data_preprocessor, ClsDataPreprocessor)
    assert model.head.fc.in_features == 512
    assert model(torch.randn(2, 3, 8, 8)).shape == (2, 10)


def test_tensor_mode_returns_logits():
    model = tiny_classifier().eval()
    x = torch.randn(2, 3, 8, 8)
    logits = model(x)
    assert logits.shape == (2, 3)
    assert torch.equal(logits, model.head(model.neck(model.backbone(x))))


def test_loss_mode_is_cross_entropy_of_gt_labels():
    model = tiny_classifier().eval()
    data = model.data_preprocessor(batch())
    losses = model(**data, mode='loss')
    labels = torch.tensor([0, 1, 2, 0])
    expected = torch.nn.functional.cross_entropy(model(data['inputs']), labels)
    assert set(losses) == {'loss'}
    assert torch.allclose(losses['loss'], expected)


def test_label_smoothing_changes_the_loss():
    feats, samples = torch.randn(4, 8), [ClsDataSample(gt_label=i % 3) for i in range(4)]
    torch.manual_seed(0)
    plain = LinearClsHead(3, 8)
    torch.manual_seed(0)
    smooth = LinearClsHead(3, 8, label_smoothing=0.2)
    assert not torch.allclose(plain.loss(feats, samples)['loss'],
                              smooth.loss(feats, samples)['loss'])


def test_predict_mode_fills_the_given_samples():
    model = tiny_classifier().eval()
    data = model.data_preprocessor(batch())
    samples = model(**data, mode='predict')
    assert samples is not data['data_samples'] and samples[0] is data['data_samples'][0]
    logits = model(data['inputs'])
    for row, sample in zip(logits, samples):
        assert torch.allclose(sample.pred_score, row.softmax(0))
        assert sample.pred_label.item() == row.argmax().item()
    assert [s.gt_label.item() for s in samples] == [0, 1, 2, 0]
    fresh = model(data['inputs'], mode='predict')
    assert len(fresh) == 4 and 'gt_label' not in fresh[0]


def test_bad_mode_and_missing_labels_are_named():
    model = tiny_classifier()
    with pytest.raises(ValueError, match='mode must be'):
        model(torch.randn(2, 3, 8, 8), mode='logits')
    with pytest.raises(ValueError, match='needs data_samples'):
        model(torch.randn(2, 3, 8, 8), mode='loss')
    with pytest.raises(ValueError, match='3 data samples for 2 images'):
        model(torch.randn(2, 3, 8, 8), [ClsDataSample()] * 3, mode='predict')


@pytest.mark.parametrize('sample, has', [
    (ClsDataSample(), 'no gt_label'),
    (ClsDataSample().set_gt_score([0.2, 0.8, 0.0]), r'no gt_label \(only gt_score, soft targets\)'),
    (ClsDataSample(gt_label=[0, 2]), '2 class indices in gt_label')])
def test_the_loss_names_a_sample_without_one_class_index(sample, has):
    # a bare AttributeError ('_gt_label') or a batch-size mismatch (3 labels for 2 rows)
    head = LinearClsHead(num_classes=3, in_channels=8)
    with pytest.raises(ValueError, match=rf'^LinearClsHead.loss: data sample 1 has {has}; the '
                       'loss is the cross-entropy against one class index per image$'):
        head.loss(torch.randn(2, 8), [ClsDataSample(gt_label=1), sample])


def test_train_and_val_steps_run_through_the_preprocessor():
    torch.manual_seed(0)
    model = tiny_classifier(data_preprocessor=dict(type='ClsDataPreprocessor',
                                                   mean=[0.5] * 3, std=[0.5] * 3))
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.5))
    data = batch(8)
    first = model.train_step(data, optim)['loss'].item()
    for _ in range(20):
        last = model.train_step(data, optim)['loss'].item()
    assert last < first
    outputs = model.val_step(data)
    assert len(outputs) == 8 and outputs[0].pred_score.shape == (3, )


def test_identity_neck_for_a_backbone_that_returns_vectors():
    model = ImageClassifier(backbone=PlainCNN(channels=(4, 8), num_classes=6),
                            neck=torch.nn.Identity(),
                            head=dict(type='LinearClsHead', num_classes=3, in_channels=6))
    assert model(torch.randn(2, 3, 8, 8)).shape == (2, 3)


@pytest.mark.parametrize('neck', [None, dict(type='GlobalAveragePooling')])
def test_a_backbone_with_its_own_classifier_under_the_pooling_neck_is_refused(neck):
    # its logits went into the pooling neck and failed at the first forward, in the head,
    # with 'mat1 and mat2 shapes cannot be multiplied (1x1 and 512x10)'
    with pytest.raises(ValueError, match=r'^ImageClassifier: the backbone ResNet ends in a '
                       r'classifier of its own \(num_classes=10\), whose logits the '
                       r'GlobalAveragePooling neck cannot pool; leave num_classes out of the '
                       r'backbone, the head classifies$'):
        MODELS.build(dict(type='ImageClassifier', neck=neck,
                          backbone=dict(type='ResNet', depth=18, stem='cifar', num_classes=10),
                          head=dict(type='LinearClsHead', num_classes=10)))


def test_backbone_with_out_indices_classifies_the_last_stage():
    model = ImageClassifier(backbone=PlainCNN(channels=(4, 8, 16), out_indices=(0, 1)),
                            head=dict(type='LinearClsHead', num_classes=5))
    assert model.head.fc.in_features == 8
    assert model(torch.randn(2, 3, 8, 8)).shape == (2, 5)


def test_head_dropout_is_optional():
    assert isinstance(LinearClsHead(3, 8).dropout, torch.nn.Identity)
    assert LinearClsHead(3, 8, dropout=0.5).dropout.p == 0.5
    with pytest.raises(ValueError, match='num_classes'):
        LinearClsHead(0, 8)


def test_preprocessor_normalises_stacks_and_packs_labels():
    pre = ClsDataPreprocessor(mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
    images = [torch.full((3, 4, 4), 0.75), torch.full((3, 4, 4), 0.25)]
    out = pre(dict(inputs=images, data_samples=torch.tensor([2, 0])))
    assert out['inputs'].shape == (2, 3, 4, 4)
    assert out['inputs'][:, 0, 0, 0].tolist() == [1.0, -1.0]
    assert [s.gt_label.tolist() for s in out['data_samples']] == [[2], [0]]
    stacked = pre(dict(inputs=torch.stack(images), data_samples=[1, 2]))  # default_collate
    assert torch.equal(stacked['inputs'], out['inputs'])
    assert pre(dict(inputs=images))['data_samples'] is None


@pytest.mark.parametrize('collate', ['pseudo_collate', 'default_collate'])
def test_preprocessor_refuses_grayscale_images_for_a_3_value_mean(collate):
    # default_collate's NCHW batch was broadcast to 3 channels, pseudo_collate's list failed
    # on a bare AssertionError
    pre = ClsDataPreprocessor(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    gray = batch(2, channels=1)
    if collate == 'default_collate':
        gray['inputs'] = torch.stack(gray['inputs'])
    with pytest.raises(ValueError, match=r'^ClsDataPreprocessor: mean \[0\.485, 0\.456, 0\.406\] '
                       r'has 3 values, one per channel, but an input image has 1 channel'):
        pre(gray)


@pytest.mark.parametrize('channels', [1, 3])
def test_preprocessor_applies_a_1_value_mean_to_every_channel(channels):
    pre = ClsDataPreprocessor(mean=[0.5], std=[0.25])
    images = torch.full((2, channels, 4, 4), 0.75)
    for inputs in (images, list(images)):  # default_collate, pseudo_collate
        out = pre(dict(inputs=inputs))['inputs']
        assert out.shape == (2, channels, 4, 4) and bool((out == 1.0).all())


def test_data_sample_converts_labels_and_round_trips():
    sample = ClsDataSample(gt_label=np.int64(4), metainfo=dict(img_path='x.png'))
    sample.pred_label = torch.tensor(2)
    sample.pred_score = [0.1, 0.9]
    assert sample.gt_label.dtype == torch.long and sample.gt_label.tolist() == [4]
    assert sample.pred_label.tolist() == [2]
    assert sample.pred_score.dtype == torch.float32
    assert set(sample.to_dict()) == {'img_path', 'gt_label', 'pred_label', 'pred_score'}
    assert sample.clone().gt_label.tolist() == [4]
    with pytest.raises(TypeError, match='integer class indices'):
        sample.gt_label = 1.5
    with pytest.raises(TypeError, match='1-D float'):
        sample.pred_score = torch.ones(2, 2)


def test_pruned_classifier_still_trains_and_predicts():
    torch.manual_seed(0)
    model = MODELS.build(dict(type='ImageClassifier',
                              backbone=dict(type='MobileNetV2', widen_factor=0.35, stem='cifar'),
                              head=dict(type='LinearClsHead', num_classes=3, dropout=0.2)))
    slim = razorlib.prune(model, torch.randn(2, 3, 8, 8), ratio=0.5)
    assert slim.head.fc.in_features == model.head.fc.in_features // 2
    optim = OptimWrapper(torch.optim.SGD(slim.parameters(), lr=0.1))
    assert torch.isfinite(slim.train_step(batch(), optim)['loss'])
    assert slim.val_step(batch())[0].pred_score.shape == (3, )
