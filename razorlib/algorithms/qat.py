"""QAT: quantization-aware training with learned scales (LSQ), trained by mmengine's Runner.

mmrazor 1.x's QAT algorithms wrap a model and a quantizer; here the model is exported to
razorlib's graph IR and quantized as post-training quantization does (the ``ptq`` settings
of a PTQ config: platform, observer, passes...), so training starts from the PTQ ranges
and the graph that comes out is the one PTQ would export: the same QDQ ONNX, run by
onnxruntime or built by TensorRT.  BatchNorm is folded into the convolutions before
training (the graph passes), as it will be in the deployed model.

With ``distill`` the fake-quantized student learns the FP32 model's logits (ModelOpt's
quantization-aware distillation, QAD): labels say only which class is right, the FP32
logits say how sure to be and what comes second, so the student learns to behave like
the model it replaces (top-1 and argmax agreement with FP32) rather than to relearn
the task from one-hot targets.
"""
import copy
import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.dist import is_main_process
from mmengine.hooks import Hook
from mmengine.model import BaseModel

from ..engine.checkpoint_check import check_fits, read_checkpoint, state_dict_of
from ..engine.utils import unwrap
from ..ir import BaseGraph
from ..models.data_sample import ClsDataSample
from ..quantization import LSQGraph, PTQSettings, export_graph, quantize_torch_model
from ..registry import HOOKS, MODELS
from .building import ModuleOrCfg, build_architecture, preprocessor_of
from .distill import cross_entropy_of, head_has_loss, head_loss_on, kd_loss

logger = logging.getLogger(__name__)

__all__ = ['QAT', 'QATExportHook', 'distill_options', 'qat_losses']

#: QAT's ``distill`` options and their defaults: the logits' loss alone, the softmax KL at
#: temperature 1.
DISTILL_DEFAULTS = dict(temperature=1.0, kd_weight=1.0, label_weight=0.0, loss='kl')
#: the logits' losses ``distill.loss`` names: what the student is asked to match
DISTILL_LOSSES = ('kl', 'mse')


def distill_options(distill: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """QAT's ``distill`` dict checked and completed with :data:`DISTILL_DEFAULTS`; None
    (no distillation) for None.

    Raises:
        TypeError: ``distill`` is not a dict.
        ValueError: an unknown key, a value that is no number, ``temperature`` or
            ``kd_weight`` not above 0, ``label_weight`` below 0, a ``loss`` not in
            :data:`DISTILL_LOSSES`, or a ``temperature`` other than 1 with ``loss='mse'``,
            which has none; the message names the key.

    Example:
        >>> distill_options(dict(label_weight=0.5))
        {'temperature': 1.0, 'kd_weight': 1.0, 'label_weight': 0.5, 'loss': 'kl'}
        >>> distill_options(dict(temprature=2.0))
        Traceback (most recent call last):
        ...
        ValueError: QAT distill.temprature: no such option; the options are temperature, \
kd_weight, label_weight, loss
    """
    if distill is None:
        return None
    if not isinstance(distill, Mapping):
        raise TypeError(f'QAT distill: expected a dict such as {DISTILL_DEFAULTS}, got '
                        f'{distill!r}')
    options = dict(DISTILL_DEFAULTS)
    for key, value in distill.items():
        if key not in DISTILL_DEFAULTS:
            raise ValueError(f'QAT distill.{key}: no such option; the options are '
                             f'{", ".join(DISTILL_DEFAULTS)}')
        if key == 'loss':
            if value not in DISTILL_LOSSES:
                raise ValueError(f'QAT distill.loss: expected one of '
                                 f'{", ".join(map(repr, DISTILL_LOSSES))}, got {value!r}')
            options[key] = str(value)
            continue
        try:
            options[key] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f'QAT distill.{key}: expected a number, got {value!r}') from None
    for key in ('temperature', 'kd_weight'):
        if not options[key] > 0:
            raise ValueError(f'QAT distill.{key}: must be > 0, got {options[key]}')
    if not options['label_weight'] >= 0:
        raise ValueError(f"QAT distill.label_weight: must be >= 0, got {options['label_weight']}")
    if options['loss'] == 'mse' and options['temperature'] != DISTILL_DEFAULTS['temperature']:
        raise ValueError(f"QAT distill.temperature: {options['temperature']:g} is the softmax's "
                         "temperature, which loss='mse' does not take (it compares the logits "
                         'themselves); leave it at 1 or out')
    return options


def qat_losses(logits: torch.Tensor, labels: Optional[torch.Tensor],
               teacher_logits: Optional[torch.Tensor] = None,
               distill: Optional[Mapping[str, Any]] = None,
               label_loss: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
    """QAT's losses from the student's logits, the labels and the FP32 teacher's logits:
    what :meth:`QAT.loss` returns (it calls this).

    A function of tensors rather than a method so that code training an
    :class:`~razorlib.quantization.LSQGraph` without mmengine's Runner, and so without a
    :class:`QAT` (``benchmarks/ptq_passes.py``), computes the algorithm's numbers from this
    one definition instead of restating them.  Sum the values for the loss to minimise, as
    mmengine does.

    Without ``distill``: ``loss``, the label loss: ``label_loss`` where given, else the
    labels' cross-entropy.  With it: ``loss_kd``, ``kd_weight`` times the logits' loss
    ``distill.loss`` names, and, when ``label_weight > 0``, ``loss_ce``, ``label_weight``
    times the label loss.  The logits' losses:

    - ``'kl'`` (the default): ``T**2 * KL(softmax(teacher / T) || softmax(student / T))``
      at ``T = temperature`` (batch mean, :func:`~razorlib.algorithms.distill.kd_loss`).
      A softmax does not see a shift of all of a row's logits, so this loss leaves them
      free to drift together;
    - ``'mse'``: the squared difference of the logits themselves, averaged over the batch
      and the classes (no ``temperature``), which asks for the FP32 logits, shift and
      all: the quantity the logits' SNR measures.

    Args:
        logits: the student's logits, (N, classes).
        labels: the class indices, (N,); may be None where no cross-entropy is taken
            (``distill`` with ``label_weight`` 0, or ``label_loss`` given).
        teacher_logits: the FP32 model's logits on the same inputs, a target (detached:
            no gradient reaches the teacher); needed with ``distill``, unused without.
        distill: QAT's ``distill`` options (any of the keys, completed and checked by
            :func:`distill_options`); None trains on the labels alone.
        label_loss: the label loss of ``logits``, computed otherwise than as their
            cross-entropy against ``labels``: :class:`QAT` passes the wrapped model's own
            (its head's loss as configured: label smoothing, class weights, mixed soft
            labels); None for the cross-entropy.

    Raises:
        ValueError: ``labels`` (with no ``label_loss``) or ``teacher_logits`` is None
            where the loss needs it, or
            a bad ``distill`` option (:func:`distill_options`).

    Example:
        >>> logits, labels = torch.tensor([[2.0, 0.0]]), torch.tensor([0])
        >>> {k: round(float(v), 4) for k, v in qat_losses(logits, labels).items()}
        {'loss': 0.1269}
        >>> teacher = torch.tensor([[0.0, 2.0]])
        >>> losses = qat_losses(logits, labels, teacher, dict(temperature=2.0, label_weight=0.5))
        >>> {k: round(float(v), 4) for k, v in losses.items()}
        {'loss_kd': 1.8485, 'loss_ce': 0.0635}
        >>> round(float(sum(losses.values())), 4)  # the loss a training loop minimises
        1.9119
        >>> {k: float(v) for k, v in qat_losses(logits, None, teacher, dict(loss='mse')).items()}
        {'loss_kd': 4.0}
    """
    options = distill_options(distill)
    with_labels = options is None or options['label_weight'] > 0
    if with_labels and label_loss is None:
        if labels is None:
            raise ValueError('qat_losses: labels is None, but the loss takes the labels\' '
                             'cross-entropy (no distill, or distill label_weight > 0, and no '
                             'label_loss)')
        label_loss = F.cross_entropy(logits, labels)
    if options is None:
        return {'loss': label_loss}
    if teacher_logits is None:
        raise ValueError('qat_losses: distill needs teacher_logits (the FP32 model\'s logits '
                         'on the same inputs), got None')
    teacher_logits = teacher_logits.detach()
    matched = (kd_loss(logits, teacher_logits, options['temperature'])
               if options['loss'] == 'kl' else F.mse_loss(logits, teacher_logits))
    losses = {'loss_kd': options['kd_weight'] * matched}
    if with_labels:
        losses['loss_ce'] = options['label_weight'] * label_loss
    return losses


def _calibration_batches(loader: Union[Mapping, Any], preprocessor, steps: int
                         ) -> List[torch.Tensor]:
    """The preprocessed images of the first ``steps`` batches of a dataloader (or its
    config, built with mmengine's Runner)."""
    if isinstance(loader, Mapping):
        from mmengine.runner import Runner
        loader = Runner.build_dataloader(dict(loader), seed=0)
    batches = []
    for step, data in enumerate(loader):
        if step == steps:
            break
        batches.append(preprocessor(data, False)['inputs'] if isinstance(data, dict) else data)
    if not batches:
        raise ValueError('QAT: calib_dataloader gave no batch; calibration needs at least one')
    return batches


def _refuse_dtype(dtype: Optional[torch.dtype]) -> None:
    """Refuse converting QAT to ``dtype`` unless it is float32 (or None: no dtype asked):
    its fake-quantized graph computes in float32 only."""
    if dtype is not None and dtype != torch.float32:
        raise TypeError(f'QAT: converting it to {dtype} (.half(), .bfloat16(), .double() or '
                        '.to(dtype)) is refused, nothing was converted: its fake-quantized '
                        'graph computes in float32 only, as the INT8 model it exports does')


def _frozen(module: nn.Module) -> nn.Module:
    """A copy of (part of) the FP32 model, in eval mode and without gradients: the
    teacher, or the head kept for its loss (a copy, so that quantizing the architecture
    cannot touch it, nor QAT the user's objects)."""
    frozen = copy.deepcopy(module).eval()
    frozen.requires_grad_(False)
    return frozen


@MODELS.register_module()
class QAT(BaseModel):
    """Quantization-aware training of a classifier with LSQ fake quantization.

    At construction the architecture (with ``checkpoint`` loaded) is quantized by
    :func:`~razorlib.quantization.quantize_torch_model` with ``quantization`` (the keys of
    a PTQ config's ``ptq`` section) on ``calib_dataloader``; its graph becomes an
    :class:`~razorlib.quantization.LSQGraph`, whose weights and scales the optimizer
    trains.  The forward runs that graph: ``'tensor'`` returns logits, ``'loss'`` the
    label loss (``loss``), ``'predict'`` data samples with ``pred_score`` and
    ``pred_label`` (mmengine's ``Accuracy`` reads them).  The label loss is the wrapped
    model's own, taken on the graph's logits: its head's ``loss`` as configured
    (razorlib's ``loss_fn``, mmpretrain's ``loss_module``: label smoothing, class weights,
    the soft labels Mixup and CutMix leave), computed by a copy of the FP32 head kept for
    its loss (``loss_head``, no submodule: in neither ``parameters()`` nor
    ``state_dict()``) whose forward answers the graph's logits, which the graph computes
    with the head's layers quantized (:func:`~razorlib.algorithms.distill.head_loss_on`,
    as distillation's student takes its own loss); an architecture whose head has no
    ``loss`` gets the cross-entropy against ``gt_label``.  :meth:`calibrated_graph` and
    :meth:`export` give the trained INT8 model; :class:`QATExportHook` writes it after
    training (its FP32 model, dequantized, is the trained float model, not the FP32
    ``checkpoint``).  A checkpoint carries the graph's quantization signature (platform,
    integer ranges, which biases are int32, zero points:
    :class:`~razorlib.quantization.LSQGraph`): loading it into a QAT quantized otherwise
    raises naming what differs, and the zero points are restored.

    With ``distill`` (quantization-aware distillation) a frozen copy of the FP32
    architecture, taken after ``checkpoint`` is loaded, is the teacher and ``'loss'``
    returns ``loss_kd``, ``kd_weight * T**2`` times the softmax KL at temperature ``T``
    (or, with ``loss='mse'``, ``kd_weight`` times the logits' mean squared difference:
    :func:`qat_losses`) and, when ``label_weight > 0``, ``loss_ce = label_weight *
    the label loss``; mmengine sums them.  The FP32 logits carry what the labels do not
    (how sure the model is, which class comes second), so the INT8 model learns to agree
    with the model it replaces.  The teacher runs in eval mode under ``no_grad`` and is
    kept out of the module tree: its parameters are not in ``parameters()`` (so not in
    the optimizer) nor in ``state_dict()`` (a checkpoint holds the student alone and
    loads into a QAT built with or without ``distill``); ``to()``/``cuda()`` move it
    with the model.

    QAT computes in float32 only: ``half()``, ``bfloat16()``, ``double()`` and
    ``to(dtype)`` are refused before anything is converted (the graph would refuse to
    run, and the data preprocessor, the architecture's own object by default, would be
    converted under its owner).

    Args:
        architecture: the FP32 classifier or its config (an mmengine model whose
            ``'tensor'`` forward returns logits).
        calib_dataloader: what PTQ calibrates on: a dataloader or its config.
        quantization: the ``ptq`` settings (:class:`~razorlib.quantization.PTQSettings`);
            None for the defaults.
        checkpoint: the trained FP32 weights (an mmengine checkpoint or a state_dict, of
            the whole model); None keeps the architecture's.
        data_preprocessor: a preprocessor or its config; default the architecture's.
        distill: distil the FP32 model's logits: ``dict(temperature=1.0, kd_weight=1.0,
            label_weight=0.0, loss='kl')`` (any of the keys, see :func:`distill_options`); None
            trains on the labels alone.
        init_cfg: mmengine initialisation config.

    Example:
        >>> net = dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(4, 8)),
        ...            head=dict(type='LinearClsHead', num_classes=3))
        >>> images = [torch.randn(4, 3, 8, 8) for _ in range(2)]
        >>> model = QAT(net, images, dict(calib_steps=2))
        >>> model(images[0]).shape, len(model.quantized.scales) > 0
        (torch.Size([4, 3]), True)

        Distilled, the loss has a term per target; the teacher trains nothing:

        >>> kd = QAT(net, images, dict(calib_steps=2), distill=dict(label_weight=0.5))
        >>> samples = [ClsDataSample(gt_label=i % 3) for i in range(4)]
        >>> sorted(kd(images[0], samples, mode='loss'))
        ['loss_ce', 'loss_kd']
        >>> len(list(kd.teacher.parameters())) > 0, len(list(kd.parameters())) == len(
        ...     list(model.parameters()))
        (True, True)
    """

    def __init__(self, architecture: ModuleOrCfg, calib_dataloader: Any,
                 quantization: Optional[Mapping[str, Any]] = None,
                 checkpoint: Union[str, Path, None] = None,
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 distill: Optional[Mapping[str, Any]] = None,
                 init_cfg: Optional[dict] = None) -> None:
        options = distill_options(distill)  # before the slow part: a typo fails at once
        settings = PTQSettings.from_config(quantization)
        refusal = settings.export_refusal('quantization.export', 'quantization.platform')
        if refusal:  # QATExportHook exports after training: refused now, not after the run
            raise ValueError(f'QAT {refusal}')
        if options is not None and checkpoint is None and isinstance(architecture, Mapping):
            logger.warning('QAT: distill with an architecture config and no checkpoint: the '
                           'teacher is its random initialisation')
        architecture = build_architecture(architecture)
        super().__init__(data_preprocessor=preprocessor_of(architecture, data_preprocessor),
                         init_cfg=init_cfg)
        if checkpoint is not None:
            state = state_dict_of(read_checkpoint(checkpoint))
            try:
                check_fits(architecture, state, checkpoint)
            except ValueError as err:
                raise ValueError(f'QAT checkpoint: {err}') from err
            architecture.load_state_dict(state)
        self.distill = options
        # set around nn.Module.__setattr__: a registered submodule would be in
        # parameters() (so in the optimizer) and in every checkpoint
        object.__setattr__(self, 'teacher', None if options is None else _frozen(architecture))
        object.__setattr__(self, 'loss_head', _frozen(architecture.head)
                           if head_has_loss(architecture) else None)
        self.settings = settings
        batches = _calibration_batches(calib_dataloader, self.data_preprocessor,
                                       self.settings.calib_steps)
        graph = quantize_torch_model(architecture.eval(), batches, batches[0], progress=False,
                                     **self.settings.quantize_kwargs())
        self.quantized = LSQGraph(graph)

    def to(self, *args: Any, **kwargs: Any) -> 'QAT':
        """``nn.Module.to``, refusing a dtype other than float32 first: mmengine's
        ``BaseModel.to`` points the data preprocessor at the new device before converting,
        so a refusal in :meth:`_apply` would come after that.

        Raises:
            TypeError: the call converts to another dtype than float32.
        """
        _refuse_dtype(torch._C._nn._parse_to(*args, **kwargs)[1])
        return super().to(*args, **kwargs)

    def _apply(self, fn, *args, **kwargs) -> 'QAT':
        """What ``to()``, ``cuda()``... do, to the teacher and the loss head too (no
        submodules).  A conversion to another dtype than float32 (``half()``,
        ``bfloat16()``, ``double()``, ``to(dtype)``) is refused before any tensor is
        converted: the graph computes in float32 only (``LSQGraph`` refuses to run
        converted), and the data preprocessor is by default the architecture's own
        object, whose normalisation would be rounded (to half precision) under its owner.

        Raises:
            TypeError: ``fn`` converts a float32 tensor to another dtype.
        """
        _refuse_dtype(fn(torch.zeros(())).dtype)  # a probe: what fn makes of a float32 tensor
        super()._apply(fn, *args, **kwargs)
        for module in (self.teacher, self.loss_head):
            if module is not None:
                module._apply(fn)
        return self

    def forward(self, inputs: torch.Tensor, data_samples: Optional[list] = None,
                mode: str = 'tensor') -> Any:
        """Logits (``'tensor'``), the losses (``'loss'``, :meth:`loss`) or scored data
        samples (``'predict'``), all from the fake-quantized graph."""
        logits = self.quantized(inputs)
        if mode == 'tensor':
            return logits
        if mode == 'loss':
            return self.loss(inputs, logits, data_samples)
        if mode == 'predict':
            scores = F.softmax(logits.detach(), dim=1)
            samples = data_samples or [ClsDataSample() for _ in range(len(scores))]
            for sample, score in zip(samples, scores):
                sample.pred_score = score
                sample.pred_label = score.argmax(dim=0)
            return list(samples)
        raise ValueError(f"QAT: mode must be 'tensor', 'loss' or 'predict', got {mode!r}")

    def loss(self, inputs: torch.Tensor, logits: torch.Tensor,
             data_samples: Optional[list]) -> Dict[str, torch.Tensor]:
        """``loss`` (the label loss, :meth:`label_loss`) without ``distill``; with it
        ``loss_kd`` against the teacher's logits on ``inputs``, and ``loss_ce`` when
        ``label_weight > 0`` (:func:`qat_losses`)."""
        label_loss = teacher_logits = None
        if self.distill is None or self.distill['label_weight'] > 0:
            label_loss = self.label_loss(logits, data_samples)
        if self.distill is not None:
            with torch.no_grad():
                teacher_logits = self.teacher(inputs)
        return qat_losses(logits, None, teacher_logits, self.distill, label_loss)

    def label_loss(self, logits: torch.Tensor, data_samples: Optional[list]) -> torch.Tensor:
        """The wrapped model's own loss on the fake-quantized ``logits``: its head's loss
        as configured (:func:`~razorlib.algorithms.distill.head_loss_on` on
        ``loss_head``), summed as mmengine sums a loss dict; the cross-entropy against
        ``gt_label`` for a head without ``loss``.

        Raises:
            ValueError: no data samples, or (a head without ``loss``) none with
                ``gt_label``.
        """
        if not data_samples:
            raise ValueError("QAT: the label loss needs data samples with labels, got "
                             f"{data_samples!r} (mode='loss' without data_samples)")
        if self.loss_head is None:
            return cross_entropy_of(logits, data_samples, "QAT: the architecture's")
        return self.parse_losses(head_loss_on(self.loss_head, logits, data_samples, 'QAT'))[0]

    def calibrated_graph(self) -> BaseGraph:
        """The trained INT8 graph (learned weights and scales), detached from training."""
        return self.quantized.calibrated_graph()

    def export(self, path: Union[str, Path], export_format: Any = None) -> Any:
        """Write the trained INT8 model: the ``ptq`` settings' export format (QDQ ONNX by
        default) unless ``export_format`` says otherwise; returns what ``export_graph``
        returns."""
        kind = export_format or self.settings.export or self.settings.platform
        return export_graph(self.calibrated_graph(), path, kind)


@HOOKS.register_module()
class QATExportHook(Hook):
    """After training, write the QAT model's INT8 ONNX model (``<work_dir>/<name>.onnx``).

    Args:
        name: the file's name, without suffix.
        out_dir: where to write; default the runner's ``work_dir``.

    Example:
        >>> custom_hooks = [dict(type='QATExportHook')]  # in a QAT config
    """
    priority = 'LOW'

    def __init__(self, name: str = 'qat_int8', out_dir: Optional[str] = None) -> None:
        self.name, self.out_dir = name, out_dir

    def before_run(self, runner) -> None:
        if not isinstance(unwrap(runner.model), QAT):
            raise TypeError(f'QATExportHook needs a QAT model, got '
                            f'{type(unwrap(runner.model)).__name__}')

    def after_train(self, runner) -> None:
        if not is_main_process():
            return
        folder = Path(self.out_dir or runner.work_dir)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f'{self.name}.onnx'
        unwrap(runner.model).export(path)
        runner.logger.info(f'QATExportHook: wrote {path}')
