"""QAT with distillation (QAD): the loss is the KL to the FP32 logits, or with loss='mse'
their squared error (plus the weighted cross-entropy), computed by qat_losses for QAT.loss
and benchmarks/ptq_passes.py alike, the frozen teacher stays out of the optimizer and the
checkpoints, bad options name their key, and the digits KD config trains through
tools/train.py.

(Named test_qat_distill.py: tests/test_quantization/test_qat.py holds the other QAT
tests, and two test files of one basename in packageless folders cannot both import.)
"""
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.optim import build_optim_wrapper

from razorlib.algorithms import QAT
from razorlib.algorithms.distill import kd_loss
from razorlib.algorithms.qat import qat_losses
from razorlib.models.data_sample import ClsDataSample
from tool_modules import load_tool

REPO = Path(__file__).parents[2]
QAT_CONFIGS = REPO / 'configs' / 'quantization' / 'qat'
NET = dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(8, 16)),
           head=dict(type='LinearClsHead', num_classes=4))


def build(distill=None) -> QAT:
    torch.manual_seed(0)
    images = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    return QAT(NET, images, dict(calib_steps=2), distill=distill)


def samples_of(labels):
    return [ClsDataSample(gt_label=label) for label in labels]


class Constant(nn.Module):
    """A teacher that answers the same logits whatever it is shown."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.logits


def test_the_kd_loss_is_the_kl_to_the_teacher_times_t_squared():
    model = build(dict(temperature=2.0, kd_weight=0.5))
    # teacher softmax at T=2: (0.75, 0.25); student's: (0.5, 0.5)
    object.__setattr__(model, 'teacher', Constant(torch.tensor([[2 * math.log(3.0), 0.0]])))
    losses = model.loss(torch.zeros(1, 3, 8, 8), torch.zeros(1, 2), samples_of([1]))
    kl = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert list(losses) == ['loss_kd']  # no label term at label_weight 0
    assert losses['loss_kd'].item() == pytest.approx(0.5 * 4 * kl, rel=1e-6)


def test_the_loss_distils_the_fp32_logits_and_adds_the_weighted_labels():
    model = build(dict(temperature=3.0, label_weight=0.25))
    with torch.no_grad():  # a random head's logits are tiny: make the student differ
        for weight in model.quantized.weights.values():
            weight.add_(torch.randn_like(weight))
    images, labels = torch.randn(6, 3, 8, 8), torch.tensor([0, 1, 2, 3, 0, 1])
    losses = model(images, samples_of(labels.tolist()), mode='loss')
    with torch.no_grad():
        student, teacher = model(images) / 3.0, model.teacher(images) / 3.0
    p_teacher = teacher.softmax(dim=1)
    kl = (p_teacher * (p_teacher.log() - student.log_softmax(dim=1))).sum() / len(images)
    ce = -student.mul(3.0).log_softmax(dim=1)[torch.arange(6), labels].mean()
    assert sorted(losses) == ['loss_ce', 'loss_kd']
    assert losses['loss_kd'].item() == pytest.approx(9 * kl.item(), rel=1e-5)
    assert losses['loss_ce'].item() == pytest.approx(0.25 * ce.item(), rel=1e-5)
    assert kl > 1e-3  # a real difference, not rounding
    assert build()(images, samples_of(labels.tolist()), mode='loss').keys() == {'loss'}


def test_qat_losses_by_hand():
    # at T=2 the teacher's softmax is (0.75, 0.25) then (0.5, 0.5), the student's (0.5,
    # 0.5) then (0.25, 0.75); at T=1 the student's is (0.5, 0.5) then (0.1, 0.9)
    student = torch.tensor([[0.0, 0.0], [0.0, 2 * math.log(3.0)]])
    teacher = torch.tensor([[2 * math.log(3.0), 0.0], [0.0, 0.0]])
    labels = torch.tensor([1, 0])
    kl = (0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
          + 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)) / 2
    ce = (math.log(2.0) + math.log(10.0)) / 2
    losses = qat_losses(student, labels, teacher,
                        dict(temperature=2.0, kd_weight=0.5, label_weight=0.25))
    assert list(losses) == ['loss_kd', 'loss_ce']
    assert losses['loss_kd'].item() == pytest.approx(0.5 * 2.0**2 * kl, rel=1e-6)
    assert losses['loss_ce'].item() == pytest.approx(0.25 * ce, rel=1e-6)
    # no label term at label_weight 0 (the default), so the labels may be left out
    alone = qat_losses(student, None, teacher, dict(temperature=2.0))
    assert list(alone) == ['loss_kd']
    assert alone['loss_kd'].item() == pytest.approx(4 * kl, rel=1e-6)
    # without distill: the labels' cross-entropy, the teacher unused
    plain = qat_losses(student, labels, teacher)
    assert list(plain) == ['loss'] and plain['loss'].item() == pytest.approx(ce, rel=1e-6)


@pytest.mark.parametrize('distill', [None, dict(temperature=3.0, label_weight=0.25)])
def test_qat_losses_summed_is_bit_for_bit_the_benchmarks_former_qat_loss(distill):
    """benchmarks/ptq_passes.py's own qat_loss, now deleted, restated: kd_loss plus the
    weighted cross-entropy; the sum of qat_losses gives the same value and gradient."""
    torch.manual_seed(0)
    logits, teacher = torch.randn(8, 5, requires_grad=True), torch.randn(8, 5)
    labels = torch.randint(0, 5, (8, ))
    if distill is None:
        former = F.cross_entropy(logits, labels)
    else:
        former = (kd_loss(logits, teacher, distill['temperature'])
                  + distill['label_weight'] * F.cross_entropy(logits, labels))
    ours = sum(qat_losses(logits, labels, teacher, distill).values())
    assert torch.equal(ours, former)
    assert torch.equal(torch.autograd.grad(ours, logits)[0],
                       torch.autograd.grad(former, logits)[0])


@pytest.mark.parametrize('distill', [None, dict(temperature=3.0, kd_weight=0.5,
                                                label_weight=0.25)])
def test_the_qat_loss_method_is_qat_losses(distill):
    model = build(distill)
    with torch.no_grad():  # a random head's logits are tiny: make the student differ
        for weight in model.quantized.weights.values():
            weight.add_(torch.randn_like(weight))
    images, labels = torch.randn(6, 3, 8, 8), torch.tensor([0, 1, 2, 3, 0, 1])
    logits = model(images)
    losses = model.loss(images, logits, samples_of(labels.tolist()))
    with torch.no_grad():
        teacher = None if distill is None else model.teacher(images)
    expected = qat_losses(logits, labels, teacher, distill)  # the options as the user wrote
    assert list(losses) == list(expected)
    assert all(torch.equal(losses[key], expected[key]) for key in expected)
    # and through forward, which computes the logits itself
    forward = model(images, samples_of(labels.tolist()), mode='loss')
    assert all(torch.equal(forward[key], expected[key]) for key in expected)


def test_the_mse_loss_asks_for_the_fp32_logits_themselves():
    """``loss='mse'``: the mean squared difference of the logits, by hand.  A shift of
    all of a row's logits costs nothing under the softmax KL and its square under the
    MSE: the drift that lowers QAT's logits SNR (benchmarks/README.md, PTQ run 12)."""
    student = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    teacher = torch.tensor([[0.0, 2.0, 5.0], [1.0, 1.0, 1.0]])
    losses = qat_losses(student, None, teacher, dict(loss='mse', kd_weight=0.5,
                                                     temperature=1.0))  # as the config writes
    assert list(losses) == ['loss_kd']
    assert losses['loss_kd'].item() == pytest.approx(0.5 * (1 + 0 + 4 + 1 + 1 + 1) / 6)
    shifted = teacher + 3.0
    assert qat_losses(teacher, None, shifted, dict())['loss_kd'].item() == pytest.approx(
        0, abs=1e-6)
    assert qat_losses(teacher, None, shifted, dict(loss='mse'))['loss_kd'].item() == \
        pytest.approx(9.0)
    with_labels = qat_losses(student, torch.tensor([2, 0]), teacher,
                             dict(loss='mse', label_weight=0.25))
    assert with_labels['loss_ce'].item() == pytest.approx(
        0.25 * F.cross_entropy(student, torch.tensor([2, 0])).item())
    # and through QAT's loss: the algorithm takes the option from its config
    model = build(dict(loss='mse'))
    object.__setattr__(model, 'teacher', Constant(torch.tensor([[3.0, 0.0, -1.0, 2.0]])))
    losses = model.loss(torch.zeros(1, 3, 8, 8), torch.zeros(1, 4), samples_of([1]))
    assert losses['loss_kd'].item() == pytest.approx((9 + 0 + 1 + 4) / 4)


def test_qat_losses_says_what_is_missing():
    logits, labels = torch.zeros(2, 3), torch.tensor([0, 1])
    with pytest.raises(ValueError, match=r'qat_losses: labels is None'):
        qat_losses(logits, None)
    with pytest.raises(ValueError, match=r'qat_losses: labels is None'):
        qat_losses(logits, None, logits, dict(label_weight=0.5))
    with pytest.raises(ValueError, match=r'qat_losses: distill needs teacher_logits'):
        qat_losses(logits, labels, None, dict())
    with pytest.raises(ValueError, match=r'QAT distill\.temprature: no such option'):
        qat_losses(logits, labels, logits, dict(temprature=2.0))


def test_the_benchmark_trains_with_qat_losses(monkeypatch):
    """benchmarks/ptq_passes.py trains an LSQGraph without the Runner: its train_qat
    takes its loss from razorlib's qat_losses, with the options it was given, and
    ``schedule='cosine'`` anneals both learning rates to 0."""
    monkeypatch.setattr(sys, 'path', list(sys.path))  # the script prepends benchmarks/
    before = set(sys.modules)
    spec = importlib.util.spec_from_file_location('ptq_passes_benchmark',
                                                  REPO / 'benchmarks' / 'ptq_passes.py')
    bench = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(bench)
    finally:
        for name in ('ptq_vs_ort', ):  # benchmarks/' own modules, out of others' way
            if name not in before:
                sys.modules.pop(name, None)
    assert bench.qat_losses is qat_losses and not hasattr(bench, 'qat_loss')
    calls = []

    def spy(logits, labels, teacher_logits=None, distill=None):
        calls.append((teacher_logits is not None, distill))
        return qat_losses(logits, labels, teacher_logits, distill)

    monkeypatch.setattr(bench, 'qat_losses', spy)
    schedules = []

    class Recorded(torch.optim.lr_scheduler.CosineAnnealingLR):
        def __init__(self, optimizer, *args, **kwargs):
            super().__init__(optimizer, *args, **kwargs)
            schedules.append(self)

    monkeypatch.setattr(torch.optim.lr_scheduler, 'CosineAnnealingLR', Recorded)
    torch.manual_seed(0)
    model = build(dict(temperature=2.0, label_weight=0.5))
    images, labels = torch.randn(64, 3, 8, 8), torch.randint(0, 4, (64, ))
    bench.train_qat(model.quantized.calibrated_graph(), images, labels, epochs=1, lr=1e-4,
                    teacher=model.teacher, temperature=2.0, label_weight=0.5)
    bench.train_qat(model.quantized.calibrated_graph(), images, labels, epochs=1, lr=1e-4,
                    schedule='cosine')  # the script's default since its run 8
    bench.train_qat(model.quantized.calibrated_graph(), images, labels, epochs=1, lr=1e-4,
                    teacher=model.teacher, kd_loss='mse')
    assert calls == [(True, dict(temperature=2.0, kd_weight=1.0, label_weight=0.5,
                                 loss='kl')),
                     (False, None),
                     (True, dict(temperature=1.0, kd_weight=1.0, label_weight=0.0,
                                 loss='mse'))]
    # only the cosine run anneals: from 1e-4 (weights) and 1e-2 (log-scales) to 0 over
    # its one step (64 images, batches of 64)
    schedule, = schedules
    groups = schedule.optimizer.param_groups
    assert [group['initial_lr'] for group in groups] == pytest.approx([1e-4, 1e-2])
    assert [group['lr'] for group in groups] == pytest.approx([0.0, 0.0], abs=1e-12)


def test_the_teacher_is_frozen_and_out_of_the_optimizer_and_the_checkpoint():
    model = build(dict(label_weight=1.0))
    teacher_ids = {id(p) for p in model.teacher.parameters()}
    assert teacher_ids and not any(p.requires_grad for p in model.teacher.parameters())
    assert not teacher_ids & {id(p) for p in model.parameters()}
    wrapper = build_optim_wrapper(model, dict(
        optimizer=dict(type='Adam', lr=1e-2),
        paramwise_cfg=dict(custom_keys={'quantized.scales': dict(lr_mult=100.0)})))
    trained = {id(p) for group in wrapper.optimizer.param_groups for p in group['params']}
    assert not teacher_ids & trained
    teacher_before = {k: v.clone() for k, v in model.teacher.state_dict().items()}
    student_before = {k: v.clone() for k, v in model.quantized.state_dict().items()}
    model.train()
    assert not model.teacher.training
    images = torch.randn(8, 3, 8, 8)
    wrapper.update_params(sum(model(images, samples_of([0, 1, 2, 3] * 2), mode='loss')
                              .values()))
    assert all(torch.equal(v, teacher_before[k]) for k, v in model.teacher.state_dict().items())
    assert any(not torch.equal(v, student_before[k])
               for k, v in model.quantized.state_dict().items())
    # a distilled checkpoint is the student's alone: it loads into a label-only QAT
    assert not any(key.startswith('teacher') for key in model.state_dict())
    build().load_state_dict(model.state_dict())


def test_the_teacher_and_the_loss_head_move_with_the_model():
    model = build(dict()).to('meta')  # a device move, as cuda() (dtypes are refused)
    assert all(p.is_meta for p in model.teacher.parameters())
    assert all(p.is_meta for p in model.loss_head.parameters())


@pytest.mark.parametrize('distill, error, message', [
    (dict(temprature=2.0), ValueError, r'QAT distill\.temprature: no such option; the '
     r'options are temperature, kd_weight, label_weight, loss'),
    (dict(loss='l2'), ValueError, r"QAT distill\.loss: expected one of 'kl', 'mse', got 'l2'"),
    (dict(loss=None), ValueError, r"QAT distill\.loss: expected one of 'kl', 'mse', got None"),
    (dict(loss='mse', temperature=2.0), ValueError,
     r"QAT distill\.temperature: 2 is the softmax's temperature, which loss='mse' does "
     r"not take"),
    (dict(temperature=0), ValueError, r'QAT distill\.temperature: must be > 0, got 0\.0'),
    (dict(kd_weight=-1), ValueError, r'QAT distill\.kd_weight: must be > 0'),
    (dict(label_weight=-0.5), ValueError, r'QAT distill\.label_weight: must be >= 0'),
    (dict(temperature='hot'), ValueError, r"QAT distill\.temperature: expected a number, "
     r"got 'hot'"),
    (True, TypeError, r'QAT distill: expected a dict'),
])
def test_bad_distill_options_name_the_key(distill, error, message):
    with pytest.raises(error, match=message):
        QAT(NET, [torch.randn(2, 3, 8, 8)], dict(calib_steps=1), distill=distill)


@pytest.mark.slow  # a whole tools/train.py run
def test_tools_train_runs_the_kd_config(tmp_path):
    from mmengine.config import Config

    from razorlib.registry import MODELS, register_all_modules
    register_all_modules()
    fp32 = MODELS.build(Config.fromfile(REPO / 'configs' / '_base_' / 'models' /
                                        'plaincnn_digits.py').model)
    torch.save(fp32.state_dict(), tmp_path / 'fp32.pth')
    train = load_tool('train')
    code = train.main([
        str(QAT_CONFIGS / 'qat_plaincnn_digits_trt_int8_kd.py'), '--work-dir',
        str(tmp_path / 'run'), '--cfg-options', f'model.checkpoint={tmp_path / "fp32.pth"}',
        'train_cfg.max_epochs=1', 'model.quantization.calib_steps=2',
        'model.distill.label_weight=0.5'])
    assert code == 0
    assert (tmp_path / 'run' / 'qat_int8.onnx').is_file()
    logged = [json.loads(line) for path in (tmp_path / 'run').rglob('vis_data/*.json')
              for line in path.read_text().splitlines()]
    assert any('loss_kd' in entry and 'loss_ce' in entry for entry in logged)
    # the checkpoint holds the INT8 model alone: the label-only config's QAT loads it
    model = QAT(Config.fromfile(QAT_CONFIGS / 'qat_plaincnn_digits_trt_int8.py').model
                .architecture, [torch.randn(2, 3, 16, 16)], dict(calib_steps=1))
    model.load_state_dict(torch.load(tmp_path / 'run' / 'epoch_1.pth')['state_dict'])
