"""SingleTeacherDistill: fine-tune a slim student with knowledge distillation from a
frozen dense teacher (mmrazor's ``SingleTeacherDistill``)."""
import copy
import difflib
import math
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.logging import MMLogger
from mmengine.model import BaseModel

from ..engine.checkpoint_check import check_fits, read_checkpoint, state_dict_of
from ..registry import MODELS
from ..utils import Complexity, get_model_complexity
from ..utils.checks import real_number
from ..utils.cli import closest
from ..utils.errors import first_line
from ..utils.inputs import random_batch
from ..utils.modes import kept_modes
from .building import ModuleOrCfg, build_architecture, pending_pretrained, preprocessor_of


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
            temperature: float = 1.0) -> torch.Tensor:
    """Hinton et al.'s distillation loss: ``T**2 * KL(softmax(t / T) || softmax(s / T))``,
    averaged over the batch; the ``T**2`` keeps its gradients' scale as ``T`` changes.

    Example:
        >>> teacher = torch.tensor([[2 * torch.log(torch.tensor(3.)), 0.]])
        >>> round(float(kd_loss(torch.zeros(1, 2), teacher, temperature=2.0)), 4)
        0.5232
    """
    return F.kl_div(F.log_softmax(student_logits / temperature, dim=1),
                    F.log_softmax(teacher_logits / temperature, dim=1),
                    reduction='batchmean', log_target=True) * temperature**2


@contextmanager
def recorded(model: nn.Module, names: Sequence[str], where: str) -> Iterator[Dict[str, Any]]:
    """The outputs of the modules ``names`` of ``model`` in the forward run inside the
    block (the last call's, for a module called twice)."""
    modules = dict(model.named_modules())
    missing = [name for name in names if name not in modules]
    if missing:
        near = difflib.get_close_matches(missing[0], [n for n in modules if n], n=3)
        raise KeyError(f'{where}: no module {missing[0]!r}'
                       + (f' (closest: {", ".join(near)})' if near else
                          f'; modules are e.g. {[n for n in modules if n][:8]}'))
    outputs: Dict[str, Any] = {}
    with ExitStack() as stack:
        for name in names:
            # a copy: the next module may change the output in place (a ReLU(inplace=True)
            # after a norm), and the feature is the named module's; the copy keeps autograd
            handle = modules[name].register_forward_hook(
                lambda mod, args, out, name=name: outputs.__setitem__(name, _copied(out)))
            stack.callback(handle.remove)
        yield outputs


def _copied(value: Any) -> Any:
    """``value`` with every tensor in it (in tuples, lists, dicts) cloned."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple) and hasattr(value, '_fields'):  # a namedtuple
        return type(value)(*(_copied(v) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_copied(v) for v in value)
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value


def _called_outputs(outputs: Dict[str, Any], names: Sequence[str], model: str) -> List[Any]:
    """The recorded outputs of the modules ``names`` of the ``model`` (student or
    teacher), refusing a module its forward never called: it has no output to match
    (a backbone stage beyond ``out_indices``, a head's unused branch)."""
    not_called = [name for name in names if name not in outputs]
    if not_called:
        raise ValueError(f'features: {model}: module {not_called[0]!r} was not called in the '
                         f"{model}'s forward, so it has no output to distil (e.g. a backbone "
                         "stage beyond the backbone's out_indices): name a module the "
                         'forward runs')
    return [outputs[name] for name in names]


def connector_for(student: torch.Tensor, teacher: torch.Tensor) -> nn.Module:
    """What maps a student feature onto the teacher's shape: nothing if they agree, a
    1x1 conv (N, C, ...) or a linear layer (N, C) when only the channels differ."""
    if student.shape == teacher.shape:
        return nn.Identity()
    if student.shape[0] != teacher.shape[0] or student.shape[2:] != teacher.shape[2:]:
        raise ValueError(f'student feature {tuple(student.shape)} and teacher feature '
                         f'{tuple(teacher.shape)} differ in more than their channels (dim 1)')
    if student.dim() == 2:
        return nn.Linear(student.shape[1], teacher.shape[1])
    conv = {3: nn.Conv1d, 4: nn.Conv2d, 5: nn.Conv3d}.get(student.dim())
    if conv is None:
        raise ValueError(f'no connector for {student.dim()}-D features')
    return conv(student.shape[1], teacher.shape[1], kernel_size=1, bias=False)


class _Forwards(NamedTuple):
    """What one forward of the student and the teacher gives
    :meth:`SingleTeacherDistill.loss` (``SingleTeacherDistill._features``)."""
    #: the outputs of the student's modules ``features`` names, in their order
    student_features: List[Any]
    #: the outputs of the teacher's modules ``features`` names, in their order
    teacher_features: List[Any]
    #: the student's logits: its head's output
    student_logits: torch.Tensor
    #: the teacher's logits, without gradient
    teacher_logits: torch.Tensor
    #: the student's own losses (its ``'loss'`` forward's dict); None where it was not run
    own_losses: Optional[Dict[str, torch.Tensor]]


@MODELS.register_module()
class SingleTeacherDistill(BaseModel):
    """Recovery fine-tuning: the student (a slim model) learns from the labels and from
    a frozen teacher (the dense model).

    The loss is ``label_weight * (the student's own loss) + kd_weight * kd_loss(student
    logits, teacher logits, temperature)`` (``loss_label``, ``loss_kd``), plus, for each
    entry of ``features``, ``weight * MSE(connector(student feature), teacher
    feature)`` (``loss_feat_<i>``): outputs of named modules recorded by forward hooks, a
    trained 1x1 conv (or linear) connector mapping the student's channels to the
    teacher's when they differ.  The student's own loss is what its ``'loss'`` forward
    returns: its head's loss as configured (razorlib's ``loss_fn``, mmpretrain's
    ``loss_module``: label smoothing, class weights, mixed soft labels), the logits
    distilled being the head's output in that forward; a student whose head has no
    ``loss`` gets the cross-entropy of its logits against ``gt_label``.  The teacher is
    built from a config and a checkpoint, its parameters frozen, and it stays in eval mode
    whatever ``train()`` says (its batch norms keep their statistics).  Only the student
    is evaluated and deployed (:meth:`slim_architecture`), and only it is counted by
    :meth:`flops_params` (what ``ResourceEstimatorHook`` logs).

    Args:
        architecture: the student, or its config (e.g. ``dict(type='sub_model', ...)``,
            a slim model from a channel config).
        teacher: the teacher, or its config.
        teacher_ckpt: the teacher's checkpoint (mmengine's, or a bare state_dict); None
            only for a teacher module that is already trained: its weights are kept (the
            runner's ``init_weights()`` leaves them alone).
        student_ckpt: weights for the student (e.g. ``SlimExportHook``'s ``slim.pth``);
            None to keep its own.
        temperature: the softmax temperature of the logit loss, > 0.
        kd_weight, label_weight: weights of the logit and label losses: finite, >= 0.
        features: ``dict(student='backbone.stages.3', teacher='backbone.stages.3',
            weight=1.0)`` per feature pair to match (``weight`` finite, >= 0).
        input_shape: ``(C, H, W)`` of one image: a dry run on it sizes the connectors.
        data_preprocessor: a preprocessor or its config; default the student's.
        init_cfg: mmengine initialisation config.

    Raises:
        TypeError: ``temperature``, ``kd_weight``, ``label_weight`` or a feature's
            ``weight`` is no real number (a string, None, a bool).
        ValueError: one of them is out of range (a negative weight trains to NaN); or a
            ``features`` entry has a key other than ``student``, ``teacher`` and
            ``weight``, or lacks a module name (:func:`_feature_pairs`).

    Example:
        >>> net = dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(8, 16)),
        ...            head=dict(type='LinearClsHead', num_classes=10))
        >>> slim = dict(net, backbone=dict(type='PlainCNN', channels=(4, 8)))
        >>> model = SingleTeacherDistill(slim, net, teacher_ckpt=None, input_shape=(3, 8, 8),
        ...                              features=[dict(student='backbone', teacher='backbone')])
        >>> model.connectors[0]
        Conv2d(8, 16, kernel_size=(1, 1), stride=(1, 1), bias=False)
        >>> model.flops_params().params == sum(p.numel() for p in model.architecture.parameters())
        True
        >>> SingleTeacherDistill(slim, net, kd_weight=-1.0)
        Traceback (most recent call last):
        ValueError: SingleTeacherDistill: kd_weight must be a finite number >= 0, got -1.0
    """

    def __init__(self, architecture: ModuleOrCfg, teacher: ModuleOrCfg,
                 teacher_ckpt: Union[str, Path, None] = None,
                 student_ckpt: Union[str, Path, None] = None, temperature: float = 4.0,
                 kd_weight: float = 1.0, label_weight: float = 1.0,
                 features: Sequence[dict] = (), input_shape: Sequence[int] = (3, 224, 224),
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 init_cfg: Optional[dict] = None):
        temperature = real_number(temperature, 'SingleTeacherDistill: temperature',
                                  'a softmax temperature')
        if not temperature > 0:
            raise ValueError(f'SingleTeacherDistill: temperature must be > 0, got '
                             f'{temperature!r}')
        kd_weight = _weight(kd_weight, 'kd_weight')
        label_weight = _weight(label_weight, 'label_weight')
        features = _feature_pairs(features)
        student = build_architecture(architecture)
        super().__init__(data_preprocessor=preprocessor_of(student, data_preprocessor),
                         init_cfg=init_cfg)
        self.architecture = student
        if isinstance(teacher, dict) and teacher_ckpt is None:
            MMLogger.get_current_instance().warning(
                'SingleTeacherDistill: the teacher is built from a config without '
                'teacher_ckpt: it distils its random initialisation')
        self.teacher = build_architecture(teacher)
        _check_teacher_apart(self.architecture, self.teacher)
        _check_teacher_preprocessing(self.teacher, self.data_preprocessor, input_shape)
        if student_ckpt is not None:
            _load(self.architecture, student_ckpt, 'student_ckpt')
        if teacher_ckpt is not None:
            _load(self.teacher, teacher_ckpt, 'teacher_ckpt')
        elif not isinstance(teacher, dict):
            # a teacher given built is trained (see teacher_ckpt), or loads its Pretrained
            # init_cfg now, as the runner would: its init_weights() would otherwise
            # initialise the trained weights again by the teacher's init_cfg
            if pending_pretrained(self.teacher):
                self.teacher.init_weights()
            _mark_initialised(self.teacher)
        self.teacher.requires_grad_(False)
        self.teacher.eval()
        self.temperature, self.kd_weight, self.label_weight = \
            temperature, kd_weight, label_weight
        self.features = features
        self.input_shape = tuple(input_shape)
        self.connectors = nn.ModuleList(self._connectors())

    def _connectors(self) -> List[nn.Module]:
        if not self.features:
            return []
        x = random_batch(self.architecture, self.input_shape, batch_size=2)
        outputs = self._features(x, no_grad=True)
        return [connector_for(s, t)
                for s, t in zip(outputs.student_features, outputs.teacher_features)]

    def _features(self, inputs: torch.Tensor, data_samples: Optional[list] = None,
                  no_grad: bool = False) -> _Forwards:
        """The student's and the teacher's features and logits, and the student's own
        losses: given ``data_samples``, the student runs its ``'loss'`` forward, its
        logits recorded from its head (else its logits forward, and no losses)."""
        names_s = [f['student'] for f in self.features]
        names_t = [f['teacher'] for f in self.features]
        head = [] if data_samples is None else ['head']
        with recorded(self.architecture, names_s + head, 'features: student') as out_s, \
                recorded(self.teacher, names_t, 'features: teacher') as out_t:
            with torch.no_grad():
                logits_t = self.teacher(inputs)
            with kept_modes(self.architecture), torch.set_grad_enabled(not no_grad):
                if no_grad:
                    self.architecture.eval()
                if data_samples is None:
                    own_losses, logits_s = None, self.architecture(inputs)
                else:
                    own_losses = self.architecture(inputs, data_samples, 'loss')
                    if 'head' not in out_s:
                        raise ValueError("SingleTeacherDistill: the student's 'loss' forward "
                                         'did not call its head, whose output are the '
                                         'logits to distil')
                    logits_s = out_s['head']
        return _Forwards(_called_outputs(out_s, names_s, 'student'),
                         _called_outputs(out_t, names_t, 'teacher'), logits_s, logits_t,
                         own_losses)

    def train(self, mode: bool = True) -> 'SingleTeacherDistill':
        """Set the student's mode; the teacher stays in eval mode."""
        super().train(mode)
        self.teacher.eval()
        return self

    def forward(self, inputs: torch.Tensor, data_samples: Optional[list] = None,
                mode: str = 'tensor') -> Any:
        """The student's forward; ``'loss'`` is :meth:`loss`."""
        if mode == 'loss':
            return self.loss(inputs, data_samples)
        return self.architecture(inputs, data_samples, mode)

    def loss(self, inputs: torch.Tensor, data_samples: Optional[list]) -> Dict[str, torch.Tensor]:
        """``loss_label``, ``loss_kd`` and ``loss_feat_<i>`` (weighted), see the class."""
        if self.label_weight and not data_samples:
            raise ValueError('SingleTeacherDistill: label_weight > 0 needs data samples with '
                             'labels')
        own_loss = self.label_weight > 0 and head_has_loss(self.architecture)
        out = self._features(inputs, data_samples if own_loss else None)
        losses = {}
        if own_loss:
            losses['loss_label'] = self.label_weight * self.parse_losses(out.own_losses)[0]
        elif self.label_weight:
            losses['loss_label'] = self.label_weight * cross_entropy_of(
                out.student_logits, data_samples, "SingleTeacherDistill: the student's")
        losses['loss_kd'] = self.kd_weight * kd_loss(out.student_logits, out.teacher_logits,
                                                     self.temperature)
        for i, (feature, connector, s, t) in enumerate(zip(
                self.features, self.connectors, out.student_features, out.teacher_features)):
            losses[f'loss_feat_{i}'] = feature['weight'] * F.mse_loss(connector(s), t)
        return losses

    def example_inputs(self) -> torch.Tensor:
        """A random ``1 x input_shape`` batch on the student's device, the same at every
        call and drawn from a generator of its own: FLOPs logged during training
        (``ResourceEstimatorHook``) must not change what is trained."""
        return random_batch(self.architecture, self.input_shape)

    def flops_params(self) -> Complexity:
        """FLOPs and parameters of the student on one ``input_shape`` image: what is
        deployed, so neither the teacher nor the connectors are counted."""
        return get_model_complexity(self.architecture, self.example_inputs())

    def slim_architecture(self) -> nn.Module:
        """A copy of the student: what ``SlimExportHook`` saves for deployment."""
        return copy.deepcopy(self.architecture)


def head_has_loss(model: nn.Module) -> bool:
    """Whether ``model``'s head has a loss of its own (razorlib's ``LinearClsHead`` its
    ``loss_fn``, mmpretrain's heads their ``loss_module``: label smoothing, class
    weights, mixed soft labels), which its ``'loss'`` forward computes: the label loss of
    distillation's student and of QAT's fake-quantized model."""
    return callable(getattr(getattr(model, 'head', None), 'loss', None))


def cross_entropy_of(logits: torch.Tensor, data_samples: list, whose: str) -> torch.Tensor:
    """The cross-entropy of ``logits`` against the samples' ``gt_label``: the label loss
    of a model whose head has no loss of its own; ``whose`` (``"QAT: the
    architecture's"``) names it in the error.

    Raises:
        ValueError: the data samples have no ``gt_label``.
    """
    if getattr(data_samples[0], 'gt_label', None) is None:
        raise ValueError(f'{whose} head has no loss of its own, so the label loss is the '
                         'cross-entropy against gt_label, which the data samples lack')
    return F.cross_entropy(logits, torch.cat([s.gt_label for s in data_samples])
                           .to(logits.device))


def head_loss_on(head: nn.Module, logits: torch.Tensor, data_samples: list,
                 where: str) -> Dict[str, torch.Tensor]:
    """The losses ``head.loss(feats, data_samples)`` computes (its loss as configured:
    label smoothing, class weights, mixed soft labels) with ``logits`` as the head's
    output: the model's own label loss on logits that another forward computed, QAT's
    fake-quantized graph, which runs the whole model (the head's layers too) itself.

    The head's ``forward`` answers ``logits`` for the call, so pass a head of one's own
    (a copy): a forward hook could only replace the output after the head's layers ran
    on the features, which that forward has not.

    Raises:
        ValueError: the head's ``loss`` returned without calling its forward, so it did
            not take ``logits``; ``where`` names the caller.  What it raises itself
            passes through (a data sample without labels...), with a note where it had
            not called its forward yet (a loss running the head's layers on the logits
            given as features fails so, with a bare shape error).
    """
    calls = []

    def forward(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(True)
        return logits

    name = f'{type(head).__name__}.loss'
    own = head.__dict__.get('forward')  # an instance's own forward (a wrapper), if any
    head.forward = forward
    try:
        losses = head.loss(logits, data_samples)
    except Exception as err:
        if not calls:
            err.add_note(f'{where}: raised in the head {name} before it called its forward; '
                         'it is given the logits in place of its features, which only its '
                         'forward answers with them')
        raise
    finally:
        if own is None:
            del head.forward  # the class's forward again
        else:
            head.forward = own
    if not calls:
        raise ValueError(f'{where}: the head {name} did not call its forward, so its loss '
                         'cannot be taken on the logits given to it')
    return losses


def _weight(value: object, name: str) -> float:
    """A loss weight: a finite real number >= 0 (a negative one trains to NaN), else
    refused naming ``name``."""
    value = real_number(value, f'SingleTeacherDistill: {name}', 'a loss weight')
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f'SingleTeacherDistill: {name} must be a finite number >= 0, '
                         f'got {value!r}')
    return value


#: The keys of an entry of ``features``: the two module names and the loss weight.
FEATURE_KEYS = ('student', 'teacher', 'weight')


def _feature_pairs(features: Any) -> List[dict]:
    """``features`` checked, each entry as ``dict(student=, teacher=, weight=)``
    (``weight`` default 1.0): a misspelled key (``weigth=0.1``) would otherwise be dropped
    silently, the pair distilled at weight 1.0, and a missing module name or a single
    dict given for the list would fail naming no entry.

    Raises:
        TypeError: ``features`` is no list of dicts, or a module name is no string.
        ValueError: ``features[i]`` has a key other than :data:`FEATURE_KEYS` (naming it
            and the closest key) or lacks ``student`` or ``teacher``; or its weight is out
            of range (:func:`_weight`).

    Example:
        >>> _feature_pairs([dict(student='neck', teacher='neck')])
        [{'student': 'neck', 'teacher': 'neck', 'weight': 1.0}]
        >>> _feature_pairs([dict(student='neck', teacher='neck', weigth=0.1)])
        Traceback (most recent call last):
        ValueError: SingleTeacherDistill: features[0]: unknown key 'weigth' (closest: \
weight); an entry takes student, teacher and weight
    """
    form = 'dict(student=<module name>, teacher=<module name>[, weight=<float>])'
    if isinstance(features, (Mapping, str, bytes)) or not isinstance(features, Sequence):
        raise TypeError(f'SingleTeacherDistill: features must be a list of {form}, got '
                        f'{type(features).__name__} {features!r}')
    pairs = []
    for i, entry in enumerate(features):
        where = f'SingleTeacherDistill: features[{i}]'
        if not isinstance(entry, Mapping):
            raise TypeError(f'{where} must be a {form}, got {entry!r}')
        unknown = [key for key in entry if key not in FEATURE_KEYS]
        if unknown:
            near = closest(str(unknown[0]), FEATURE_KEYS)
            raise ValueError(f'{where}: unknown key {unknown[0]!r}'
                             + (f' (closest: {", ".join(near)})' if near else '')
                             + '; an entry takes student, teacher and weight')
        for side in ('student', 'teacher'):
            if side not in entry:
                raise ValueError(f'{where}: no {side!r}: give the name of the {side} module '
                                 f'whose output to match, {form}')
            if not isinstance(entry[side], str):
                raise TypeError(f'{where}.{side} must be a module name (a string), got '
                                f'{entry[side]!r}')
        pairs.append(dict(student=entry['student'], teacher=entry['teacher'],
                          weight=_weight(entry.get('weight', 1.0), f'features[{i}].weight')))
    return pairs


def _check_teacher_apart(student: nn.Module, teacher: nn.Module) -> None:
    """Refuse a teacher that is the student, or shares parameters with it (one module
    passed as both, or a teacher holding the student's backbone): freezing the teacher
    would freeze those parameters of the student, and keeping the teacher in eval mode
    would keep them so, so the student would silently not learn what they hold."""
    if teacher is student:
        raise ValueError('SingleTeacherDistill: the teacher is the student itself (one '
                         'module passed as both architecture and teacher): freezing the '
                         'teacher would freeze the student. Build the teacher separately '
                         '(from its config and teacher_ckpt)')
    own = {id(p): name for name, p in student.named_parameters()}
    shared = [(name, own[id(p)]) for name, p in teacher.named_parameters() if id(p) in own]
    if shared:
        raise ValueError(f'SingleTeacherDistill: the teacher shares {len(shared)} parameters '
                         f'with the student (teacher {shared[0][0]!r} is student '
                         f'{shared[0][1]!r}): freezing the teacher would freeze them in the '
                         'student. Build the teacher separately (from its config and '
                         'teacher_ckpt)')


def _check_teacher_preprocessing(teacher: nn.Module, preprocessor: Optional[nn.Module],
                                 input_shape: Sequence[int]) -> None:
    """Refuse a teacher whose own data preprocessor prepares images otherwise than the
    algorithm's: the teacher is fed the algorithm's preprocessed inputs, so it would see
    images scaled as it was never trained on.  Both preprocessors, of whatever class
    (mmengine's ``ImgDataPreprocessor``, mmpretrain's, one of the user's), run on the same
    probe batch.  A teacher preprocessor that leaves the images as they are (an unset
    ``ClsDataPreprocessor``, a config without one) is taken as unset, with a warning; so
    is a pair that cannot be compared (a teacher without one, a preprocessor failing on
    the probe), the warning saying why."""
    own = getattr(teacher, 'data_preprocessor', None)
    if own is preprocessor:
        return
    probe = torch.arange(2 * math.prod(input_shape), dtype=torch.float32)
    probe = (probe % 256).reshape(2, *input_shape)
    try:
        ours = _prepared(preprocessor, probe, "the algorithm's data_preprocessor")
        theirs = _prepared(own, probe, "the teacher's data_preprocessor")
    except _Incomparable as reason:
        _warn_teacher_preprocessing(f'cannot check that the teacher was trained on inputs '
                                    f"prepared as the algorithm's: {reason}")
        return
    if ours.shape == theirs.shape and torch.allclose(ours, theirs):
        return
    if theirs.shape == probe.shape and torch.equal(theirs, probe):
        _warn_teacher_preprocessing("the teacher's data_preprocessor does not normalise")
        return
    raise ValueError("SingleTeacherDistill: the teacher's data_preprocessor prepares images "
                     "otherwise than the algorithm's (the student's, or data_preprocessor): "
                     "the teacher is fed the algorithm's inputs, so give both the same "
                     "mean, std and channel order")


class _Incomparable(Exception):
    """Why two data preprocessors' outputs cannot be compared."""


def _prepared(preprocessor: Any, probe: torch.Tensor, whose: str) -> torch.Tensor:
    """The ``inputs`` ``preprocessor`` makes of ``probe`` (on the CPU, as floats), or
    :class:`_Incomparable` saying why there are none."""
    if not callable(preprocessor):
        raise _Incomparable(f'{whose} is {preprocessor!r}, not a callable preprocessor')
    what = f'{whose} ({type(preprocessor).__name__})'
    try:
        with torch.no_grad():
            out = preprocessor(dict(inputs=probe), False)
    except Exception as err:  # any failure only means that the two cannot be compared
        raise _Incomparable(f'{what} fails on a probe batch of shape {tuple(probe.shape)}: '
                            f'{first_line(err)}') from err
    inputs = out.get('inputs') if isinstance(out, dict) else None
    if not isinstance(inputs, torch.Tensor):
        raise _Incomparable(f"{what} returns no tensor under 'inputs' but "
                            f'{type(inputs).__name__}')
    return inputs.detach().cpu().float()


def _warn_teacher_preprocessing(why: str) -> None:
    """Warn that the teacher's inputs are not known to be prepared as it was trained
    (``why``), for the user to check: a teacher fed inputs normalised otherwise gives
    silently wrong logits to distil."""
    MMLogger.get_current_instance().warning(
        f"SingleTeacherDistill: {why}; the teacher is fed the images as the algorithm's "
        'data_preprocessor prepares them')


def _load(model: nn.Module, path: Union[str, Path], key: str) -> None:
    """Load a checkpoint that must fit ``model`` exactly, naming ``key`` on failure."""
    try:
        state = state_dict_of(read_checkpoint(path))
        check_fits(model, state, path)
    except ValueError as err:
        raise ValueError(f'SingleTeacherDistill {key}: {err}') from err
    model.load_state_dict(state)
    _mark_initialised(model)


def _mark_initialised(model: nn.Module) -> None:
    """Keep ``model``'s weights through the runner's ``init_weights()``, which would
    otherwise run its init_cfg (a Pretrained checkpoint, a constant...) over them, as
    mmrazor's distillers note."""
    model._is_init = True
