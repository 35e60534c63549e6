"""QAT's label loss is the wrapped model's own (its head's loss as configured: label
smoothing, class weights, mmpretrain's loss_module and mixed soft labels), taken on the
fake-quantized graph's logits; it was plain cross-entropy.  And QAT refuses a dtype
conversion before converting anything: ``half()`` rounded the normalisation of the
architecture's own data preprocessor, then the graph refused to run."""
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from loss_heads import PretrainStyleHead, SmoothedCrossEntropy
from razorlib.algorithms import QAT
from razorlib.algorithms.distill import head_loss_on
from razorlib.models.data_sample import ClsDataSample
from razorlib.models.heads import LinearClsHead
from razorlib.registry import MODELS

NET = dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(8, 16)),
           head=dict(type='LinearClsHead', num_classes=4),
           data_preprocessor=dict(type='ClsDataPreprocessor', mean=[123.675, 116.28, 103.53],
                                  std=[58.395, 57.12, 57.375]))
LABELS = torch.tensor([0, 1, 2, 3, 0, 1])
WEIGHTS = torch.tensor([1.0, 2.0, 3.0, 4.0])


def architecture(head: nn.Module = None) -> nn.Module:
    torch.manual_seed(0)
    net = MODELS.build(NET)
    if head is not None:
        net.head = head
    return net


def qat(net: nn.Module, distill=None) -> QAT:
    images = [torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(i))
              for i in range(2)]
    model = QAT(net, images, dict(calib_steps=2), distill=distill)
    with torch.no_grad():  # a random head's logits are tiny: give the loss some range
        for weight in model.quantized.weights.values():
            weight.add_(torch.randn_like(weight))
    return model


def samples(labels=LABELS):
    return [ClsDataSample(gt_label=int(label)) for label in labels]


def weighted_head() -> LinearClsHead:
    head = LinearClsHead(4, 16)
    head.loss_fn = nn.CrossEntropyLoss(weight=WEIGHTS)
    return head


HEADS = {
    # razorlib's LinearClsHead(label_smoothing=0.1)
    'label_smoothing': (lambda: LinearClsHead(4, 16, label_smoothing=0.1),
                        lambda logits: F.cross_entropy(logits, LABELS, label_smoothing=0.1)),
    'class_weights': (weighted_head,
                      lambda logits: F.cross_entropy(logits, LABELS, weight=WEIGHTS)),
    # mmpretrain's LinearClsHead(loss=dict(type='LabelSmoothLoss', ..., loss_weight=0.5))
    'loss_module': (lambda: PretrainStyleHead(SmoothedCrossEntropy(0.2, loss_weight=0.5),
                                              in_channels=16, num_classes=4),
                    lambda logits: 0.5 * F.cross_entropy(logits, LABELS, label_smoothing=0.2)),
}


@pytest.mark.parametrize('head', list(HEADS))
def test_the_label_loss_is_the_heads_own_on_the_quantized_logits(head):
    make_head, own_loss = HEADS[head]
    model = qat(architecture(make_head()))
    x = torch.randn(6, 3, 8, 8, generator=torch.Generator().manual_seed(9))
    loss = model(x, samples(), mode='loss')
    logits = model(x)  # the fake-quantized graph's
    expected = own_loss(logits)
    assert list(loss) == ['loss']
    assert torch.allclose(loss['loss'], expected, rtol=1e-6, atol=0)
    # what QAT computed before: the plain cross-entropy, a different number
    assert not torch.isclose(loss['loss'], F.cross_entropy(logits, LABELS), rtol=1e-5, atol=0)
    # and its gradient reaches the graph's weights as the head's loss's does
    weight = next(iter(model.quantized.weights.values()))
    ours, = torch.autograd.grad(loss['loss'], weight)
    theirs, = torch.autograd.grad(own_loss(model(x)), weight)
    assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-8)
    assert ours.abs().sum() > 0


def test_the_distilled_label_term_is_the_weighted_own_loss():
    model = qat(architecture(LinearClsHead(4, 16, label_smoothing=0.1)),
                distill=dict(label_weight=0.25))
    x = torch.randn(6, 3, 8, 8, generator=torch.Generator().manual_seed(9))
    losses = model(x, samples(), mode='loss')
    expected = 0.25 * F.cross_entropy(model(x), LABELS, label_smoothing=0.1)
    assert sorted(losses) == ['loss_ce', 'loss_kd']
    assert torch.allclose(losses['loss_ce'], expected, rtol=1e-6, atol=0)


def test_mixed_samples_are_scored_against_their_soft_labels():
    # mmpretrain's Mixup and CutMix keep each sample's gt_label and add the mixed gt_score
    model = qat(architecture(PretrainStyleHead(SmoothedCrossEntropy(0.0), in_channels=16,
                                               num_classes=4)))
    mixed = torch.softmax(torch.randn(6, 4, generator=torch.Generator().manual_seed(1)), 1)
    batch = samples()
    for sample, score in zip(batch, mixed):
        sample.gt_score = score
    x = torch.randn(6, 3, 8, 8, generator=torch.Generator().manual_seed(9))
    loss = model(x, batch, mode='loss')['loss']
    logits = model(x)
    assert torch.allclose(loss, F.cross_entropy(logits, mixed), rtol=1e-6, atol=0)
    assert not torch.isclose(loss, F.cross_entropy(logits, LABELS), rtol=1e-5, atol=0)


def test_the_loss_head_is_a_frozen_copy_outside_the_optimizer_and_the_checkpoint():
    net = architecture(LinearClsHead(4, 16, label_smoothing=0.1))
    model = qat(net)
    assert model.loss_head is not net.head
    assert model.loss_head.loss_fn.label_smoothing == 0.1
    head_ids = {id(p) for p in model.loss_head.parameters()}
    assert head_ids and not head_ids & {id(p) for p in model.parameters()}
    assert not any(key.startswith('loss_head') for key in model.state_dict())
    model(torch.randn(2, 3, 8, 8), samples([0, 1]), mode='loss')
    assert 'forward' not in vars(model.loss_head)  # its own forward again
    assert not any(p.requires_grad for p in model.loss_head.parameters())
    # the head's own refusal passes through, noted
    with pytest.raises(ValueError, match=re.escape(
            'LinearClsHead.loss: data sample 0 has no gt_label; the loss is the '
            'cross-entropy against one class index per image')) as refused:
        model(torch.randn(2, 3, 8, 8), [ClsDataSample(), ClsDataSample()], mode='loss')
    assert refused.value.__notes__[0].startswith(
        'QAT: raised in the head LinearClsHead.loss before it called its forward')
    assert 'forward' not in vars(model.loss_head)


def test_a_head_without_a_loss_gets_cross_entropy_and_missing_labels_are_named():
    net = architecture()
    net.head = nn.Linear(16, 4)
    model = qat(net)
    assert model.loss_head is None
    x = torch.randn(6, 3, 8, 8, generator=torch.Generator().manual_seed(9))
    loss = model(x, samples(), mode='loss')['loss']
    assert torch.equal(loss, F.cross_entropy(model(x), LABELS))
    with pytest.raises(ValueError, match=re.escape(
            "QAT: the architecture's head has no loss of its own, so the label loss is the "
            'cross-entropy against gt_label, which the data samples lack')):
        model(x, [ClsDataSample() for _ in range(6)], mode='loss')
    with pytest.raises(ValueError, match=re.escape(
            "QAT: the label loss needs data samples with labels, got None (mode='loss' "
            'without data_samples)')):
        model(x, None, mode='loss')


class LossWithoutForward(LinearClsHead):
    """A head whose loss reads its layer's weight rather than calling its forward."""

    def loss(self, feats, data_samples):
        return dict(loss=self.fc.weight.sum())


class LossOnItsLayer(LinearClsHead):
    """A head whose loss runs its layer on the features rather than calling its forward:
    given the logits, (N, 4), in place of the features, (N, 16)."""

    def loss(self, feats, data_samples):
        return dict(loss=self.fc(feats).sum())


def test_a_head_loss_that_skips_the_heads_forward_is_refused():
    x, batch = torch.randn(2, 3, 8, 8), samples([0, 1])
    with pytest.raises(ValueError, match=re.escape(
            'QAT: the head LossWithoutForward.loss did not call its forward, so its loss '
            'cannot be taken on the logits given to it')):
        qat(architecture(LossWithoutForward(4, 16)))(x, batch, mode='loss')
    with pytest.raises(RuntimeError, match='shapes cannot be multiplied') as failed:
        qat(architecture(LossOnItsLayer(4, 16)))(x, batch, mode='loss')
    assert failed.value.__notes__ == [
        'QAT: raised in the head LossOnItsLayer.loss before it called its forward; it is '
        'given the logits in place of its features, which only its forward answers with them']


def refusal(dtype: torch.dtype) -> str:
    return (f'QAT: converting it to {dtype} (.half(), .bfloat16(), .double() or .to(dtype)) '
            'is refused, nothing was converted: its fake-quantized graph computes in float32 '
            'only, as the INT8 model it exports does')


@pytest.mark.parametrize('convert, dtype', [
    (lambda m: m.half(), torch.float16), (lambda m: m.bfloat16(), torch.bfloat16),
    (lambda m: m.double(), torch.float64), (lambda m: m.to(torch.float16), torch.float16)])
def test_a_dtype_conversion_is_refused_before_the_users_preprocessor_is_converted(
        convert, dtype):
    net = architecture()
    model = qat(net, distill=dict())
    user = net.data_preprocessor
    assert model.data_preprocessor is user  # the architecture's own object
    mean = user.mean.clone()
    x = torch.randn(2, 3, 8, 8)
    before = model(x).detach()
    with pytest.raises(TypeError, match=f'^{re.escape(refusal(dtype))}$'):
        convert(model)
    # half() converted it to (123.6875, 116.25, 103.5) before the graph refused to run
    assert user.mean.dtype == torch.float32 and torch.equal(user.mean, mean)
    assert all(t.dtype == torch.float32 for m in (model, model.teacher, model.loss_head)
               for t in [*m.parameters(), *m.buffers()] if t.is_floating_point())
    assert torch.equal(model(x), before)  # it still runs, unchanged
    assert model.float() is model  # float32 is no conversion


def test_to_a_device_and_a_dtype_is_refused_before_the_preprocessor_is_moved():
    """mmengine's BaseModel.to points the data preprocessor at the device before it
    converts; QAT refuses the dtype first, so the preprocessor still says cpu."""
    model = qat(architecture())
    with pytest.raises(TypeError, match=f'^{re.escape(refusal(torch.float16))}$'):
        model.to('meta', torch.float16)
    assert model.data_preprocessor.device == torch.device('cpu')
    assert all(p.device.type == 'cpu' for p in model.parameters())
    assert model.to('cpu', torch.float32) is model


def test_the_loss_on_given_logits_puts_back_a_heads_own_forward():
    """head_loss_on answers the logits through the head's forward for one call, then
    restores what was there: the class's forward, or an instance's own (a wrapper)."""
    head = architecture().head
    wrapped = head.forward
    head.forward = lambda *a, **k: wrapped(*a, **k)
    own = head.forward
    logits = torch.randn(2, 4)
    head_loss_on(head, logits, [ClsDataSample().set_gt_label(1)] * 2, 'test')
    assert head.forward is own
    del head.forward
    head_loss_on(head, logits, [ClsDataSample().set_gt_label(1)] * 2, 'test')
    assert 'forward' not in head.__dict__
