"""Calibration: run the graph over a dataloader, feed observers, render the configs.

Every INITIAL config with no ``master_by`` is calibrated by one observer per dominance set
(the set's root names the observer): parameters are observed once, activations at every
operation boundary that quantizes them, over ``steps`` batches.  Each observed set is then
rendered (ACTIVATED), and passive configs get their derived scale: a bias mastered by its
layer's weight gets ``input scale x weight scale`` and the state PASSIVE, or FP32 when its
layer's input or weight stays unquantized.  A set that saw only zeros (a dead activation)
stays FP32: no scale fits it, and the smallest one breaks integer kernels downstream.
A dataloader that yields no batch, or a batch whose shape the graph does not take (a
fixed axis of another size: a graph exported with static shapes), is an error naming the
batch and both shapes; an observer's error (a NaN or infinite tensor) gains a note naming
the tensor and its operation.  An observed tensor whose variable has no dtype recorded
(a graph quantized without ``prepare_graph``) gets the dtype it was observed in, which the
QDQ export checks.
"""
import logging
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple, Union

import torch

from ..ir import (BaseGraph, QuantableOperation, QuantizationStates, TensorQuantizationConfig,
                  Variable)
from ..ir.executor.shapes import InputShapeError
from .batches import BatchToInputs, graph_batches
from .executor import QuantExecutor
from .observers import MIN_SCALE, Observer, build_observer, observer_class
from .state import quantable_operations

logger = logging.getLogger(__name__)

__all__ = ['calibrate', 'render_passive_configs']

_S = QuantizationStates
_Tap = Tuple[int, Observer]


class _Taps:
    """Which tensors of which operations feed which observer."""

    def __init__(self, options: Mapping[str, dict]) -> None:
        # By class, so that options given under 'kl' reach configs naming 'KLObserver'.
        self.options = {observer_class(key): value for key, value in options.items()}
        self.observers: Dict[TensorQuantizationConfig, Observer] = {}
        self.inputs: Dict[QuantableOperation, List[_Tap]] = {}
        self.outputs: Dict[QuantableOperation, List[_Tap]] = {}
        self.observed: Set[TensorQuantizationConfig] = set()
        self._seen: Set[Tuple[TensorQuantizationConfig, str]] = set()

    def add(self, op: QuantableOperation) -> None:
        sides = ((op.input_quant_config, op.inputs, self.inputs),
                 (op.output_quant_config, op.outputs, self.outputs))
        for configs, variables, taps in sides:
            for index, (config, var) in enumerate(zip(configs, variables)):
                if config.state is not _S.INITIAL or config.master_by is not None:
                    continue
                root = config.dominated_by
                if (root, var.name) in self._seen:  # one observation per tensor and set
                    continue
                self._seen.add((root, var.name))
                observer = self._observer(root)
                if var.is_parameter:
                    _observe(observer, var.value, f'parameter {var.name!r} of op {op.name!r}')
                    self.observed.add(root)
                else:
                    taps.setdefault(op, []).append((index, observer))

    def _observer(self, root: TensorQuantizationConfig) -> Observer:
        if root not in self.observers:
            options = self.options.get(observer_class(root.observer_algorithm), {})
            self.observers[root] = build_observer(root, **options)
        return self.observers[root]

    def pre_hook(self, op, inputs) -> None:
        for index, observer in self.inputs.get(op, ()):
            _observe(observer, inputs[index],
                     f'input {index} ({op.inputs[index].name!r}) of op {op.name!r}')
            _record_dtype(op.inputs[index], inputs[index])
            self.observed.add(op.input_quant_config[index].dominated_by)

    def post_hook(self, op, inputs, outputs) -> None:
        for index, observer in self.outputs.get(op, ()):
            _observe(observer, outputs[index],
                     f'output {index} ({op.outputs[index].name!r}) of op {op.name!r}')
            _record_dtype(op.outputs[index], outputs[index])
            self.observed.add(op.output_quant_config[index].dominated_by)


def _record_dtype(var: Variable, tensor: torch.Tensor) -> None:
    """Give ``var`` the dtype of the tensor observed for it when it has none recorded (a
    graph quantized without ``prepare_graph``, from an ONNX model without value_info): the
    QDQ export refuses a quantized tensor of another dtype than float32 (a model that casts
    to half precision in its forward;
    :func:`~razorlib.quantization.state.check_quantized_float32`) by its recorded dtype, and
    would otherwise write a model no runtime loads."""
    if var.dtype is None:
        var.dtype = tensor.dtype


def _observe(observer: Observer, tensor: torch.Tensor, what: str) -> None:
    """``observer.observe(tensor)``; an error it raises (a NaN, a rank change) gains a
    note naming the tensor and its operation."""
    try:
        observer.observe(tensor)
    except Exception as err:
        err.add_note(f'calibrate: while observing {what}')
        raise


def calibrate(graph: BaseGraph, dataloader: Iterable, steps: int = 32,
              collate_fn: Optional[BatchToInputs] = None,
              device: Union[str, torch.device] = 'cpu', progress: bool = True,
              observer_options: Optional[Mapping[str, Dict[str, Any]]] = None) -> BaseGraph:
    """Calibrate the INITIAL configs of a quantized graph on ``steps`` batches.

    The graph runs in a :class:`~razorlib.quantization.QuantExecutor`, so configs that
    are not INITIAL (calibrated before, FP32) apply as they are while the others are
    observed in floating point (on purpose: the executor's uncalibrated-graph warning is
    off).

    Args:
        graph: a graph from :func:`~razorlib.quantization.quantize_graph`, changed in
            place.
        dataloader: any iterable of batches.
        steps: how many batches to run at most.
        collate_fn: maps a batch to graph inputs (see
            :func:`~razorlib.quantization.batches.graph_batches`).
        device: where to run the graph.
        progress: show a progress bar.
        observer_options: observer (class or short name) -> keyword arguments of its
            constructor, e.g. ``{'percentile': {'percentile': 99.9}}``.

    Returns:
        ``graph``, so calls chain.

    Raises:
        ValueError: ``steps`` is not positive, the dataloader yields no batch, a batch
            does not fit the graph's input shapes
            (:class:`~razorlib.ir.executor.shapes.InputShapeError`, naming the batch,
            the input and both shapes); what an observer raises on a tensor it cannot
            observe (inf or nan).
        KeyError: ``observer_options`` names no registered observer.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.randn(4, 3, 1, 1), is_parameter=True)
        >>> b = graph.create_variable('b', torch.randn(4), is_parameter=True)
        >>> conv = graph.create_operation('Conv', 'conv', inputs=[graph.variables['x'], w, b],
        ...                               outputs=[graph.create_variable('y')])
        >>> graph = quantize_graph(graph, 'ORT_INT8')
        >>> graph = calibrate(graph, [torch.randn(2, 3, 8, 8) for _ in range(4)], progress=False)
        >>> x, w, b = graph.operations['conv'].input_quant_config
        >>> x.state.name, w.state.name, b.state.name
        ('ACTIVATED', 'ACTIVATED', 'PASSIVE')
        >>> torch.equal(b.scale, x.scale * w.scale)
        True
    """
    taps = _Taps(observer_options or {})
    for op in quantable_operations(graph):
        taps.add(op)
    executor = QuantExecutor(graph, device, warn_uncalibrated=False)  # observes INITIAL ones
    handles = [executor.register_forward_pre_hook(taps.pre_hook),
               executor.register_forward_hook(taps.post_hook)]
    seen = 0
    try:
        for seen, inputs in enumerate(graph_batches(dataloader, steps, collate_fn, progress), 1):
            _run_batch(executor, inputs, seen - 1)
    finally:
        for handle in handles:
            handle.remove()
    if seen == 0:
        raise ValueError(f'calibrate: the dataloader of graph {graph.name!r} gave no batch; '
                         'calibration needs at least one')
    for root, observer in taps.observers.items():
        if root not in taps.observed:
            logger.warning('calibrate: a %s config of graph %r saw no tensor and stays '
                           'INITIAL (not quantized)', root.observer_algorithm, graph.name)
            continue
        observer.render(root)
        if bool((root.scale <= MIN_SCALE).all()):
            logger.warning('calibrate: a %s config of graph %r saw only zeros and stays FP32',
                           root.observer_algorithm, graph.name)
            root.state = _S.FP32
    return render_passive_configs(graph)


def _run_batch(executor: QuantExecutor, inputs: Any, index: int) -> None:
    """Run one calibration batch; a shape the graph does not take names the batch."""
    try:
        executor(inputs)
    except InputShapeError as error:
        raise InputShapeError(error.graph_name, error.input_name, error.expected, error.given,
                              where=f'calibration batch {index}') from None


def render_passive_configs(graph: BaseGraph) -> BaseGraph:
    """Give every INITIAL bias mastered by a weight its scale, input scale x weight scale.

    A bias stays in floating point (FP32) when its layer's input (input 0) or weight is
    not quantized, when its integers would not fit its range (an input that was always
    zero in calibration gets the smallest scale, and so would its bias), or when the
    weight's scales are not one per output channel (a config set by hand per channel on
    another axis); the last two are logged.

    Args:
        graph: a graph whose activations and weights are calibrated, changed in place.

    Returns:
        ``graph``, so calls chain.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.ones(2, 1, 1, 1), is_parameter=True)
        >>> b = graph.create_variable('b', torch.ones(2), is_parameter=True)
        >>> conv = graph.create_operation('Conv', 'conv', inputs=[graph.variables['x'], w, b],
        ...                               outputs=[graph.create_variable('y')])
        >>> x, w, b = quantize_graph(graph, 'ORT_INT8').operations['conv'].input_quant_config
        >>> x.scale, x.state = torch.tensor(0.5), QuantizationStates.ACTIVATED
        >>> w.scale, w.state = torch.tensor([0.25, 0.5]), QuantizationStates.ACTIVATED
        >>> render_passive_configs(graph) is graph, b.scale, b.state.name
        (True, tensor([0.1250, 0.2500]), 'PASSIVE')
    """
    for op in quantable_operations(graph):
        for config in op.input_quant_config:
            if config.state is not _S.INITIAL or config.master_by is None:
                continue
            weight, data = config.master_by, op.input_quant_config[0]
            if not (weight.state.is_quantized and data.state.is_quantized):
                config.state = _S.FP32
                continue
            scale = data.scale * weight.scale
            bias = op.inputs[op.input_quant_config.index(config)].value
            if bias is not None and not _fits(scale, bias, config):
                logger.warning('calibrate: the bias of %s %r has %s, its input x weight scale '
                               '%d values; it stays FP32', op.type, op.name,
                               _channels(bias, config), scale.numel())
                config.state = _S.FP32
                continue
            if bias is not None and bool((bias.abs() / scale.to(bias)).max() > config.quant_max):
                logger.warning('calibrate: the bias of %s %r overflows %d bits at scale input '
                               'x weight; it stays FP32', op.type, op.name, config.num_of_bits)
                config.state = _S.FP32
                continue
            config.scale, config.offset = scale, torch.zeros_like(scale)
            config.state = _S.PASSIVE
    return graph


def _channels(bias: torch.Tensor, config: TensorQuantizationConfig) -> str:
    if config.channel_axis is None or config.channel_axis >= bias.dim():
        return f'shape {tuple(bias.shape)}'
    return f'{bias.shape[config.channel_axis]} channels'


def _fits(scale: torch.Tensor, bias: torch.Tensor, config: TensorQuantizationConfig) -> bool:
    """Whether a bias scale of ``scale.numel()`` values fits ``bias`` under ``config``: one
    value, or one per channel on the config's axis (a weight scale per channel on an axis
    that does not hold the output channels gives neither)."""
    if scale.numel() == 1:
        return True
    axis = config.channel_axis
    return axis is not None and axis < bias.dim() and bias.shape[axis] == scale.numel()
