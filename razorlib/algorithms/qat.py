"""QAT: quantization-aware training with learned scales (LSQ), trained by mmengine's Runner.

mmrazor 1.x's QAT algorithms wrap a model and a quantizer; here the model is exported to
razorlib's graph IR and quantized as post-training quantization does (the ``ptq`` settings
of a PTQ config: platform, observer, passes...), so training starts from the PTQ ranges
and the graph that comes out is the one PTQ would export: the same QDQ ONNX, run by
onnxruntime or built by TensorRT.  BatchNorm is folded into the convolutions before
training (the graph passes), as it will be in the deployed model.
"""
import logging
from pathlib import Path
from typing import Any, List, Mapping, Optional, Union

import torch
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
from .pruning_base import labels_of

logger = logging.getLogger(__name__)

__all__ = ['QAT', 'QATExportHook']


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


@MODELS.register_module()
class QAT(BaseModel):
    """Quantization-aware training of a classifier with LSQ fake quantization.

    At construction the architecture (with ``checkpoint`` loaded) is quantized by
    :func:`~razorlib.quantization.quantize_torch_model` with ``quantization`` (the keys of
    a PTQ config's ``ptq`` section) on ``calib_dataloader``; its graph becomes an
    :class:`~razorlib.quantization.LSQGraph`, whose weights and scales the optimizer
    trains.  The forward runs that graph: ``'tensor'`` returns logits, ``'loss'`` the
    cross-entropy (``loss``), ``'predict'`` data samples with ``pred_score`` and
    ``pred_label`` (mmengine's ``Accuracy`` reads them).  :meth:`calibrated_graph` and
    :meth:`export` give the trained INT8 model; :class:`QATExportHook` writes it after
    training.

    Args:
        architecture: the FP32 classifier or its config (an mmengine model whose
            ``'tensor'`` forward returns logits).
        calib_dataloader: what PTQ calibrates on: a dataloader or its config.
        quantization: the ``ptq`` settings (:class:`~razorlib.quantization.PTQSettings`);
            None for the defaults.
        checkpoint: the trained FP32 weights (an mmengine checkpoint or a state_dict, of
            the whole model); None keeps the architecture's.
        data_preprocessor: a preprocessor or its config; default the architecture's.
        init_cfg: mmengine initialisation config.

    Example:
        >>> net = dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(4, 8)),
        ...            head=dict(type='LinearClsHead', num_classes=3))
        >>> images = [torch.randn(4, 3, 8, 8) for _ in range(2)]
        >>> model = QAT(net, images, dict(calib_steps=2))
        >>> model(images[0]).shape, len(model.quantized.scales) > 0
        (torch.Size([4, 3]), True)
    """

    def __init__(self, architecture: ModuleOrCfg, calib_dataloader: Any,
                 quantization: Optional[Mapping[str, Any]] = None,
                 checkpoint: Union[str, Path, None] = None,
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 init_cfg: Optional[dict] = None) -> None:
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
        self.settings = PTQSettings.from_config(quantization)
        batches = _calibration_batches(calib_dataloader, self.data_preprocessor,
                                       self.settings.calib_steps)
        graph = quantize_torch_model(architecture.eval(), batches, batches[0], progress=False,
                                     **self.settings.quantize_kwargs())
        self.quantized = LSQGraph(graph)

    def forward(self, inputs: torch.Tensor, data_samples: Optional[list] = None,
                mode: str = 'tensor') -> Any:
        """Logits (``'tensor'``), ``{'loss': ...}`` (``'loss'``) or scored data samples
        (``'predict'``), all from the fake-quantized graph."""
        logits = self.quantized(inputs)
        if mode == 'tensor':
            return logits
        if mode == 'loss':
            labels = labels_of(data_samples, 'QAT').to(logits.device)
            return {'loss': F.cross_entropy(logits, labels)}
        if mode == 'predict':
            scores = F.softmax(logits.detach(), dim=1)
            samples = data_samples or [ClsDataSample() for _ in range(len(scores))]
            for sample, score in zip(samples, scores):
                sample.pred_score = score
                sample.pred_label = score.argmax(dim=0)
            return list(samples)
        raise ValueError(f"QAT: mode must be 'tensor', 'loss' or 'predict', got {mode!r}")

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
