"""SingleTeacherDistill: the KD loss by hand, a frozen teacher in eval mode built from a
config and a checkpoint, feature KD through connectors, the digits config in the Runner
and the ImageNet config."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.model import BaseDataPreprocessor
from mmengine.optim import OptimWrapper
from mmengine.registry import init_default_scope

from loss_heads import PretrainStyleHead, SmoothedCrossEntropy
from pruning_helpers import CONFIGS, digits_batch, run_config, tiny_classifier
from razorlib.algorithms import SingleTeacherDistill, sub_model
from razorlib.algorithms.distill import kd_loss
from razorlib.engine.hooks import ResourceEstimatorHook
from razorlib.models.data_sample import ClsDataSample
from razorlib.models.heads import LinearClsHead
from razorlib.pruning import L1NormPruner
from razorlib.registry import MODELS
from razorlib.utils import Complexity, get_model_complexity


def test_the_kd_loss_is_t_squared_times_the_kl_of_the_softened_distributions():
    # teacher softmax at T=2: (0.75, 0.25); student: (0.5, 0.5)
    teacher = torch.tensor([[2 * math.log(3.0), 0.0]])
    kl = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert float(kd_loss(torch.zeros(1, 2), teacher, 2.0)) == pytest.approx(4 * kl)
    assert float(kd_loss(teacher, teacher, 3.0)) == pytest.approx(0.0, abs=1e-7)


@pytest.fixture
def teacher_ckpt(tmp_path):
    torch.manual_seed(3)
    dense = MODELS.build(tiny_classifier())
    torch.save({'state_dict': dense.state_dict()}, tmp_path / 'teacher.pth')
    return tmp_path / 'teacher.pth'


def distill(teacher_ckpt, **kwargs) -> SingleTeacherDistill:
    torch.manual_seed(0)
    return SingleTeacherDistill(architecture=tiny_classifier((4, 8)), teacher=tiny_classifier(),
                                teacher_ckpt=teacher_ckpt, input_shape=(3, 16, 16), **kwargs)


def test_the_teacher_comes_from_its_checkpoint_frozen_and_stays_in_eval_mode(teacher_ckpt):
    model = distill(teacher_ckpt).train()
    saved = torch.load(teacher_ckpt)['state_dict']
    assert all(torch.equal(t, saved[k]) for k, t in model.teacher.state_dict().items())
    assert not model.teacher.training and model.architecture.training
    assert not any(p.requires_grad for p in model.teacher.parameters())
    model.train_step(digits_batch(), OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1)))
    assert all(torch.equal(t, saved[k]) for k, t in model.teacher.state_dict().items())


def test_the_losses_are_the_weighted_label_kd_and_feature_terms(teacher_ckpt):
    model = distill(teacher_ckpt, temperature=3.0, kd_weight=0.5, label_weight=2.0,
                    features=[dict(student='backbone', teacher='backbone', weight=0.1)]).eval()
    data = model.data_preprocessor(digits_batch(), False)
    x, samples = data['inputs'], data['data_samples']
    losses = model(x, samples, mode='loss')
    with torch.no_grad():
        s_logits, t_logits = model.architecture(x), model.teacher(x)
        s_feat, t_feat = model.architecture.backbone(x), model.teacher.backbone(x)
    labels = torch.cat([s.gt_label for s in samples])
    assert torch.isclose(losses['loss_label'], 2.0 * F.cross_entropy(s_logits, labels))
    assert torch.isclose(losses['loss_kd'], 0.5 * kd_loss(s_logits, t_logits, 3.0))
    connector = model.connectors[0]  # 8 student channels onto the teacher's 16
    assert (connector.in_channels, connector.out_channels) == (8, 16)
    assert torch.isclose(losses['loss_feat_0'], 0.1 * F.mse_loss(connector(s_feat), t_feat))


def distill_with_head(teacher_ckpt, head: nn.Module) -> SingleTeacherDistill:
    torch.manual_seed(0)
    student = MODELS.build(tiny_classifier((4, 8)))
    student.head = head
    return SingleTeacherDistill(architecture=student, teacher=tiny_classifier(),
                                teacher_ckpt=teacher_ckpt, input_shape=(3, 16, 16),
                                label_weight=2.0).eval()


def loss_and_logits(model: SingleTeacherDistill, samples_of=None):
    data = model.data_preprocessor(digits_batch(), False)
    x, samples = data['inputs'], data['data_samples']
    if samples_of is not None:
        samples = samples_of(samples)
    losses = model(x, samples, mode='loss')
    with torch.no_grad():
        logits = model.architecture(x)
    return losses['loss_label'], logits, torch.cat([s.gt_label for s in samples])


@pytest.mark.parametrize('head', ['razorlib', 'mmpretrain'])
def test_the_label_loss_is_the_students_head_loss_as_configured(teacher_ckpt, head):
    # an mmpretrain head keeps its loss in loss_module: it got plain cross-entropy
    built = (LinearClsHead(10, 8, label_smoothing=0.1) if head == 'razorlib' else
             PretrainStyleHead(SmoothedCrossEntropy(label_smooth_val=0.1, loss_weight=0.5)))
    weight = 1.0 if head == 'razorlib' else 0.5
    loss, logits, labels = loss_and_logits(distill_with_head(teacher_ckpt, built))
    expected = 2.0 * weight * F.cross_entropy(logits, labels, label_smoothing=0.1)
    assert torch.isclose(loss, expected)
    assert not torch.isclose(loss, 2.0 * F.cross_entropy(logits, labels))


def test_the_label_loss_of_mixed_samples_is_against_their_soft_labels(teacher_ckpt):
    # mmpretrain's Mixup leaves each sample's gt_label and adds the mixed gt_score
    model = distill_with_head(teacher_ckpt, PretrainStyleHead(SmoothedCrossEntropy(0.0)))
    mixed = torch.softmax(torch.randn(16, 10, generator=torch.Generator().manual_seed(0)), 1)

    def with_scores(samples):
        for sample, score in zip(samples, mixed):
            sample.gt_score = score
        return samples

    loss, logits, labels = loss_and_logits(model, with_scores)
    assert torch.isclose(loss, 2.0 * F.cross_entropy(logits, mixed))
    assert not torch.isclose(loss, 2.0 * F.cross_entropy(logits, labels))


def test_a_head_without_a_loss_of_its_own_gets_cross_entropy(teacher_ckpt):
    torch.manual_seed(0)
    model = distill_with_head(teacher_ckpt, nn.Linear(8, 10))
    loss, logits, labels = loss_and_logits(model)
    assert torch.isclose(loss, 2.0 * F.cross_entropy(logits, labels))
    x = model.data_preprocessor(digits_batch(), False)['inputs']
    with pytest.raises(ValueError, match="^SingleTeacherDistill: the student's head has no "
                       'loss of its own, so the label loss is the cross-entropy against '
                       'gt_label, which the data samples lack$'):
        model(x, [ClsDataSample() for _ in x], mode='loss')
    with pytest.raises(ValueError, match='^SingleTeacherDistill: label_weight > 0 needs data '
                       'samples with labels$'):
        model(x, None, mode='loss')


def test_a_feature_is_the_named_modules_output_before_an_in_place_activation(teacher_ckpt):
    # each stage's bn is followed by ReLU(inplace=True), which rewrites the bn's output
    model = distill(teacher_ckpt, kd_weight=0.0, label_weight=0.0,
                    features=[dict(student='backbone.stages.1.bn',
                                   teacher='backbone.stages.1.bn')]).eval()
    x = model.data_preprocessor(digits_batch(), False)['inputs']
    loss = model(x, None, mode='loss')['loss_feat_0']

    def bn_output(net):
        stages = net.backbone.stages
        return stages[1].bn(stages[1].conv(stages[0](x)))

    with torch.no_grad():
        expected = F.mse_loss(model.connectors[0](bn_output(model.architecture)),
                              bn_output(model.teacher))
        after_relu = F.mse_loss(model.connectors[0](bn_output(model.architecture).relu()),
                                bn_output(model.teacher).relu())
    assert torch.isclose(loss, expected) and not torch.isclose(loss, after_relu)
    loss.backward()  # the copy keeps the student's graph
    assert model.architecture.backbone.stages[1].conv.weight.grad.abs().sum() > 0


def test_the_runners_init_weights_keeps_the_loaded_checkpoints(teacher_ckpt, tmp_path):
    torch.manual_seed(1)
    torch.save(MODELS.build(tiny_classifier((4, 8))).state_dict(), tmp_path / 'slim.pth')
    zero = dict(type='Constant', val=0.0, layer=['Conv2d', 'Linear'])
    model = MODELS.build(dict(type='SingleTeacherDistill',
                              architecture=dict(tiny_classifier((4, 8)), init_cfg=zero),
                              student_ckpt=str(tmp_path / 'slim.pth'),
                              teacher=dict(tiny_classifier(), init_cfg=zero),
                              teacher_ckpt=str(teacher_ckpt), input_shape=(3, 16, 16)))
    model.init_weights()  # as Runner.train() does
    for net, saved in ((model.teacher, torch.load(teacher_ckpt)['state_dict']),
                       (model.architecture, torch.load(tmp_path / 'slim.pth'))):
        assert all(torch.equal(t, saved[k]) for k, t in net.state_dict().items())


def test_the_runners_init_weights_keeps_a_trained_teacher_given_built():
    # teacher_ckpt=None is for a teacher module already trained: its init_cfg (here a
    # random normal) must not run over its weights when the runner initialises the model
    teacher = MODELS.build(dict(tiny_classifier(),
                                init_cfg=dict(type='Normal', std=1.0, layer='Conv2d')))
    trained = {k: v.clone() for k, v in teacher.state_dict().items()}
    model = SingleTeacherDistill(architecture=tiny_classifier((4, 8)), teacher=teacher,
                                 input_shape=(3, 16, 16))
    model.init_weights()  # as Runner.train() does
    assert all(torch.equal(t, trained[k]) for k, t in model.teacher.state_dict().items())


def test_a_teacher_given_built_with_a_pretrained_init_cfg_loads_its_checkpoint(teacher_ckpt):
    teacher = MODELS.build(dict(tiny_classifier(), init_cfg=dict(
        type='Pretrained', checkpoint=str(teacher_ckpt))))
    model = SingleTeacherDistill(architecture=tiny_classifier((4, 8)), teacher=teacher,
                                 input_shape=(3, 16, 16))
    model.init_weights()
    saved = torch.load(teacher_ckpt)['state_dict']
    assert all(torch.equal(t, saved[k]) for k, t in model.teacher.state_dict().items())


def test_a_teacher_normalised_otherwise_is_refused(teacher_ckpt):
    imagenet = dict(type='ClsDataPreprocessor', mean=[0.485, 0.456, 0.406],
                    std=[0.229, 0.224, 0.225])
    with pytest.raises(ValueError, match="the teacher's data_preprocessor prepares images "
                       "otherwise than the algorithm's"):
        SingleTeacherDistill(architecture=tiny_classifier((4, 8)),
                             teacher=dict(tiny_classifier(), data_preprocessor=imagenet),
                             teacher_ckpt=teacher_ckpt, input_shape=(3, 16, 16))
    # the same normalisation given to the algorithm itself is accepted
    model = SingleTeacherDistill(architecture=tiny_classifier((4, 8)),
                                 teacher=dict(tiny_classifier(), data_preprocessor=imagenet),
                                 teacher_ckpt=teacher_ckpt, input_shape=(3, 16, 16),
                                 data_preprocessor=imagenet)
    assert torch.allclose(model.data_preprocessor.mean.flatten(),
                          torch.tensor([0.485, 0.456, 0.406]))


class Normaliser(BaseDataPreprocessor):
    """A normalising preprocessor that is no ``ImgDataPreprocessor`` (as mmpretrain's)."""

    def __init__(self, mean: float, std: float):
        super().__init__()
        self.mean, self.std = mean, std

    def forward(self, data: dict, training: bool = False) -> dict:
        data = super().forward(data, training)
        return dict(data, inputs=(data['inputs'].float() - self.mean) / self.std)


class Failing(BaseDataPreprocessor):
    """A preprocessor that cannot prepare the probe batch (it wants labels)."""

    def forward(self, data: dict, training: bool = False) -> dict:
        raise KeyError('data_samples')


def student_with(preprocessor) -> torch.nn.Module:
    student = MODELS.build(tiny_classifier((4, 8)))  # its own: mean 0.5, std 0.5
    student.data_preprocessor = preprocessor
    return student


@pytest.mark.parametrize('preprocessor', [Normaliser(0.45, 0.225), BaseDataPreprocessor()],
                         ids=['another-normalisation', 'none'])
def test_a_teacher_normalised_otherwise_is_refused_whatever_the_preprocessor_class(
        teacher_ckpt, preprocessor):
    with pytest.raises(ValueError, match="the teacher's data_preprocessor prepares images "
                       "otherwise than the algorithm's"):
        SingleTeacherDistill(architecture=student_with(preprocessor), teacher=tiny_classifier(),
                             teacher_ckpt=teacher_ckpt, input_shape=(3, 16, 16))


@pytest.fixture
def warnings(monkeypatch) -> list:
    """What SingleTeacherDistill warns about through mmengine's current logger."""
    logged = []
    monkeypatch.setattr(MMLogger.get_current_instance(), 'warning', logged.append)
    return logged


def test_a_teacher_normalised_alike_by_another_class_is_accepted(teacher_ckpt, warnings):
    SingleTeacherDistill(architecture=student_with(Normaliser(0.5, 0.5)),
                         teacher=tiny_classifier(), teacher_ckpt=teacher_ckpt,
                         input_shape=(3, 16, 16))
    assert warnings == []


def test_preprocessors_that_cannot_be_compared_are_warned_about(teacher_ckpt, warnings):
    SingleTeacherDistill(architecture=student_with(Failing()), teacher=tiny_classifier(),
                         teacher_ckpt=teacher_ckpt, input_shape=(3, 16, 16))
    assert warnings == [
        "SingleTeacherDistill: cannot check that the teacher was trained on inputs prepared "
        "as the algorithm's: the algorithm's data_preprocessor (Failing) fails on a probe "
        "batch of shape (2, 3, 16, 16): KeyError: 'data_samples'; the teacher is fed the "
        "images as the algorithm's data_preprocessor prepares them"]


def test_a_student_equal_to_its_teacher_has_nothing_to_distil(teacher_ckpt):
    model = SingleTeacherDistill(architecture=tiny_classifier(), teacher=tiny_classifier(),
                                 teacher_ckpt=teacher_ckpt, student_ckpt=teacher_ckpt,
                                 input_shape=(3, 16, 16),
                                 features=[dict(student='neck', teacher='neck')]).eval()
    data = model.data_preprocessor(digits_batch(), False)
    losses = model(data['inputs'], data['data_samples'], mode='loss')
    assert isinstance(model.connectors[0], torch.nn.Identity)
    assert float(losses['loss_kd']) == pytest.approx(0.0, abs=1e-6)
    assert float(losses['loss_feat_0']) == pytest.approx(0.0, abs=1e-9)


def test_a_teacher_that_is_or_shares_the_student_is_refused_before_freezing_it():
    student = MODELS.build(tiny_classifier())
    with pytest.raises(ValueError, match='the teacher is the student itself'):
        SingleTeacherDistill(architecture=student, teacher=student, input_shape=(3, 16, 16))
    teacher = MODELS.build(tiny_classifier())
    teacher.backbone = student.backbone
    with pytest.raises(ValueError, match=r"shares 6 parameters with the student \(teacher "
                                         r"'backbone.stages.0.conv.weight' is student "
                                         r"'backbone.stages.0.conv.weight'\)"):
        SingleTeacherDistill(architecture=student, teacher=teacher, input_shape=(3, 16, 16))
    # the student is left trainable
    assert all(p.requires_grad for p in student.parameters()) and student.training


def test_mistakes_name_the_argument_and_the_module(teacher_ckpt, tmp_path):
    with pytest.raises(ValueError, match='teacher_ckpt: .*missing.pth does not exist'):
        distill(tmp_path / 'missing.pth')
    with pytest.raises(ValueError, match='student_ckpt: .*not a checkpoint of this'):
        distill(teacher_ckpt, student_ckpt=teacher_ckpt)  # a dense checkpoint, slim student
    with pytest.raises(KeyError, match="features: teacher: no module 'backbone.nope'"):
        distill(teacher_ckpt, features=[dict(student='backbone', teacher='backbone.nope')])
    with pytest.raises(KeyError, match=r"features: student: no module 'backbone.stage.1' "
                       r"\(closest: backbone.stages.1, "):
        distill(teacher_ckpt, features=[dict(student='backbone.stage.1', teacher='backbone')])


@pytest.mark.parametrize('key, model', [('architecture', 'student'), ('teacher', 'teacher')])
def test_a_feature_module_the_forward_never_calls_is_named(teacher_ckpt, key, model):
    # with out_indices=(0,) PlainCNN stops after stage 0: stage 1 never runs
    nets = dict(architecture=tiny_classifier((4, 8)), teacher=tiny_classifier())
    nets[key] = dict(nets[key], backbone=dict(nets[key]['backbone'], out_indices=(0,)))
    with pytest.raises(ValueError, match=f"^features: {model}: module 'backbone.stages.1' was "
                       f"not called in the {model}'s forward"):
        SingleTeacherDistill(teacher_ckpt=None, input_shape=(3, 16, 16), **nets,
                             features=[dict(student='backbone.stages.1',
                                            teacher='backbone.stages.1')])


def test_a_missing_channel_cfg_names_the_key_and_what_writes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r'^channel_cfg: channel config .*slim.yaml does '
                       r'not exist; .*tools/prune.py'):
        sub_model(tiny_classifier(), tmp_path / 'slim.yaml')


def test_only_the_student_is_counted_in_flops_and_params(teacher_ckpt):
    model = distill(teacher_ckpt, features=[dict(student='backbone', teacher='backbone')])
    assert not isinstance(model.connectors[0], torch.nn.Identity)  # a connector with weights
    student = sum(p.numel() for p in model.architecture.parameters())
    assert sum(p.numel() for p in model.parameters()) > student  # teacher and connector
    x = torch.randn(1, 3, 16, 16)
    whole = get_model_complexity(model, x)  # what the hook counted before: FLOPs of the
    assert model.flops_params() == Complexity(whole.flops, student)  # student's forward
    estimate = ResourceEstimatorHook(input_shape=(3, 16, 16)).estimate(model)
    assert estimate == {'flops_M': whole.flops / 1e6, 'params_M': student / 1e6}


def test_sizing_connectors_and_counting_flops_leave_the_global_rng_as_it_was(teacher_ckpt):
    # global draws made the training run depend on whether ResourceEstimatorHook logged
    student, teacher = MODELS.build(tiny_classifier()), MODELS.build(tiny_classifier())
    state = torch.get_rng_state()
    model = SingleTeacherDistill(student, teacher, input_shape=(3, 16, 16),  # equal shapes:
                                 features=[dict(student='neck', teacher='neck')])  # Identity
    assert isinstance(model.connectors[0], torch.nn.Identity)
    model.flops_params()
    ResourceEstimatorHook(interval=1).estimate(model)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(model.example_inputs(), model.example_inputs())


@pytest.mark.parametrize('cfg, error, message', [
    (dict(kd_weight=-1.0), ValueError, 'kd_weight must be a finite number >= 0, got -1.0'),
    (dict(kd_weight=float('inf')), ValueError, 'kd_weight must be a finite number >= 0, got inf'),
    (dict(kd_weight=float('nan')), ValueError, 'kd_weight must be a number .*got nan'),
    (dict(kd_weight='1'), TypeError, "kd_weight must be a number .*got '1' .str."),
    (dict(label_weight='abc'), TypeError, "label_weight must be a number .*got 'abc' .str."),
    (dict(label_weight=-0.5), ValueError, 'label_weight must be a finite number >= 0, got -0.5'),
    (dict(label_weight=True), TypeError, 'label_weight must be a number .*got True .bool.'),
    (dict(features=[dict(student='backbone', teacher='backbone'),
                    dict(student='neck', teacher='neck', weight=-5.0)]),
     ValueError, r'features\[1\]\.weight must be a finite number >= 0, got -5.0'),
    (dict(features=[dict(student='neck', teacher='neck', weight=None)]),
     TypeError, r'features\[0\]\.weight must be a number .*got None'),
    (dict(temperature='4'), TypeError, "temperature must be a number .*got '4' .str."),
    (dict(temperature=0), ValueError, 'temperature must be > 0, got 0.0'),
])
def test_loss_weights_must_be_finite_numbers_not_below_zero(teacher_ckpt, cfg, error, message):
    with pytest.raises(error, match=f'^SingleTeacherDistill: {message}'):
        distill(teacher_ckpt, **cfg)


def test_zero_weights_are_accepted(teacher_ckpt):
    model = distill(teacher_ckpt, kd_weight=0, label_weight=0.0,
                    features=[dict(student='neck', teacher='neck', weight=0)])
    assert (model.kd_weight, model.label_weight, model.features[0]['weight']) == (0.0, 0.0, 0.0)
    assert all(type(w) is float for w in (model.kd_weight, model.features[0]['weight']))


def slim_files(folder, arch: dict):
    """A channel config and the slim weights of ``arch`` pruned to half its channels."""
    init_default_scope('razorlib')
    dense = MODELS.build(arch)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(dense, torch.randn(1, 3, 16, 16))
    pruner.set_subnet(pruner.subnet_at(0.5))
    cfg = pruner.export_subnet()
    cfg.dump(folder / 'slim.yaml')
    torch.save(pruner.deploy_subnet(dense, cfg).state_dict(), folder / 'slim.pth')
    return folder


def test_the_digits_config_fine_tunes_the_slim_student_in_the_runner(teacher_ckpt, tmp_path):
    channels = [8, 16]
    arch = tiny_classifier(channels)
    pruned = slim_files(tmp_path, arch)
    run_config('distill/distill_plaincnn_digits.py', tmp_path / 'run', {
        'model.architecture.channel_cfg': str(pruned / 'slim.yaml'),
        'model.student_ckpt': str(pruned / 'slim.pth'), 'model.teacher_ckpt': str(teacher_ckpt),
        'model.architecture.architecture.backbone.channels': channels,
        'model.architecture.architecture.backbone.strides': [1, 2],
        'model.teacher.backbone.channels': channels, 'model.teacher.backbone.strides': [1, 2],
        'model.features': [dict(student='backbone.stages.1', teacher='backbone.stages.1')]})
    student = sub_model(arch, pruned / 'slim.yaml')
    student.load_state_dict(torch.load(tmp_path / 'run' / 'slim.pth'))  # the distilled one
    before = torch.load(pruned / 'slim.pth')
    assert any(not torch.equal(before[k], v) for k, v in student.state_dict().items())


def test_the_imagenet_config_builds(tmp_path):
    config = Config.fromfile(CONFIGS / 'distill' / 'distill_resnet50_imagenet.py')
    arch = config.model.teacher
    slim_files(tmp_path, arch)  # a ResNet-50 at half width stands in for the pruned one
    config.model.architecture.channel_cfg = str(tmp_path / 'slim.yaml')
    config.model.student_ckpt = str(tmp_path / 'slim.pth')
    config.model.teacher_ckpt = None
    model = MODELS.build(config.model)
    assert model.temperature == 1.0 and not model.teacher.training
    assert model.architecture.backbone.stem[0].conv.out_channels == 32
