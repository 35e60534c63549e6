"""One-call post-training quantization of a PyTorch model or an ONNX model.

``quantize_torch_model`` exports the model (:func:`~razorlib.ir.from_torch`),
``quantize_onnx_model`` reads the ONNX model (:func:`~razorlib.ir.from_onnx`); both then
record shapes and dtypes, run the graph passes (:data:`DEFAULT_PASSES` through a
:class:`~razorlib.ir.PassManager`), dispatch and quantize for the platform
(:func:`~razorlib.quantization.quantize_graph`), set the activations' observer and
calibrate (:func:`~razorlib.quantization.calibrate`), with the PTQ passes
(:mod:`razorlib.quantization.passes`) before quantizing and after calibrating.  The graph
that comes back runs quantized in a :class:`~razorlib.quantization.QuantExecutor` and
exports with :func:`~razorlib.quantization.export_graph`.  The arguments are checked
before any work (:func:`check_quantize_arguments`), and each calibration batch against
the graph's inputs (:func:`~razorlib.quantization.batches.checked_inputs`).

Observers and dispatchers are given as registered names (``'kl'``, ``'conservative'``)
or as config dicts (``dict(type='KLObserver', bins=2048)``), as in a PTQ config file
(``configs/quantization/ptq/``).  A graph exported with ``dynamic_batch=True`` takes any
batch size; otherwise its shapes are the example inputs', and a calibration batch of
another shape is an error naming it.
"""
import logging
import os
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Sequence, Union

import onnx
import torch

from ..ir import BaseGraph, PassManager, QuantizationStates, TorchExecutor, from_onnx, from_torch
from ..ir.components import registered, split_type
from ..ir.passes import GraphPass
from ..registry import DISPATCHERS, GRAPH_PASSES, PTQ_PASSES
from ..utils.checks import check_options, integer_number
from .batches import BatchToInputs, checked_inputs, graph_batches
from .calibration import calibrate
from .dispatch import DispatchingTable
from .observers import observer_class
from .passes import PTQPass, build_ptq_passes, run_ptq_passes
from .platform import TargetPlatform
from .quantize import quantize_graph
from .state import check_float32, check_quantized_float32, quantable_operations

logger = logging.getLogger(__name__)

__all__ = ['DEFAULT_PASSES', 'check_options', 'prepare_graph', 'quantize_onnx_model',
           'quantize_torch_model', 'set_activation_observer']

_Platform = Union[TargetPlatform, str]
_Spec = Union[str, Mapping[str, Any]]

DEFAULT_PASSES = ('FormatConstant', 'FormatParameter', 'FuseBatchNorm', 'FuseGemm',
                  'FuseBiasAdd', 'FuseLayerNorm', 'FuseGelu', 'DeleteIsolated')
"""The graph passes run before quantizing: Constant nodes become parameters (quantizers
see weights), shared parameters are split (each reader's can be baked), BatchNorm, bias
Adds and MatMul + Add fold into their layers (one quantized layer each), primitive
LayerNorm and GELU become single ops, and what no output needs goes."""


def _lookup(find: Callable[[str], Any], kind: str, parameter: str) -> Any:
    """``find(kind)``, a KeyError naming ``parameter``."""
    try:
        return find(kind)
    except KeyError as error:
        raise KeyError(f'{parameter}: {error.args[0]}') from None


def _check_spec(find: Callable[[str], Any], spec: Any, parameter: str,
                skip: Sequence[str] = ()) -> None:
    """A name or ``dict(type=..., **options)`` that ``find`` knows, with options it takes."""
    kind, options = split_type(spec, parameter)
    check_options(_lookup(find, kind, parameter), options, parameter, skip)


def _check_observer(spec: Any, parameter: str) -> None:
    """A registered observer name or config dict with options it takes, built once with
    them, so that the values it refuses (``percentile=200``) are refused now,
    naming ``parameter``, and not at calibration, after the export and the graph passes."""
    kind, options = split_type(spec, parameter)
    cls = _lookup(observer_class, kind, parameter)
    check_options(cls, options, parameter, skip=['channel_axis'])
    try:
        cls(**options)
    except (TypeError, ValueError) as error:
        raise type(error)(f'{parameter}: {error}') from error


def _check_pass_list(specs: Any, parameter: str, registry, base: type) -> None:
    """A list or tuple of registered names, config dicts or built passes."""
    if isinstance(specs, (str, Mapping)):
        raise TypeError(f'{parameter} must be a list of names or dicts, got the '
                        f'{type(specs).__name__} {specs!r}; write [{specs!r}]')
    if not isinstance(specs, (list, tuple)):
        raise TypeError(f'{parameter} must be a list of names or dicts, got '
                        f'{type(specs).__name__} {specs!r}')
    for spec in specs:
        if not isinstance(spec, base):
            _check_spec(lambda kind: registered(registry, kind), spec, parameter)


def check_quantize_arguments(prefix: str = '', calib_steps: Any = 32,
                             observer: Any = 'percentile',
                             observer_options: Optional[Mapping[str, Any]] = None,
                             dispatcher: Any = 'conservative', passes: Any = DEFAULT_PASSES,
                             ptq_passes: Any = (), dynamic_batch: Any = True) -> None:
    """Check the arguments of :func:`quantize_torch_model` before any work is done.

    Every message names the argument, with ``prefix`` (``'ptq.'`` for a PTQ config):
    ``calib_steps`` must be an int of at least 1 and ``dynamic_batch`` a bool; observers,
    dispatchers and passes must be registered, and the options of their config dicts
    keyword parameters of their constructors; ``passes`` and ``ptq_passes`` must be lists,
    not a bare name; the PTQ passes are built (so their own checks run).

    Raises:
        TypeError: a value of the wrong type, an option the constructor does not take.
        KeyError: a name that is not registered; the message lists those that are.
        ValueError: ``calib_steps`` below 1, what a PTQ pass refuses.

    Example:
        >>> check_quantize_arguments('ptq.', calib_steps='4')
        Traceback (most recent call last):
        ...
        TypeError: ptq.calib_steps must be an integer (a number of batches), got '4' (str)
        >>> check_quantize_arguments(passes='FuseBatchNorm')
        Traceback (most recent call last):
        ...
        TypeError: passes must be a list of names or dicts, got the str 'FuseBatchNorm'; \
write ['FuseBatchNorm']
    """
    integer_number(calib_steps, f'{prefix}calib_steps', 'a number of batches', minimum=1)
    if not isinstance(dynamic_batch, bool):
        raise TypeError(f'{prefix}dynamic_batch must be True or False, got '
                        f'{type(dynamic_batch).__name__} {dynamic_batch!r}')
    if observer is not None:
        _check_observer(observer, f'{prefix}observer')
    if observer_options is not None:
        if not isinstance(observer_options, Mapping):
            raise TypeError(f'{prefix}observer_options must be a dict of observer name -> '
                            f'options, got {type(observer_options).__name__}')
        for name, options in observer_options.items():
            where = f'{prefix}observer_options[{name!r}]'
            if not isinstance(options, Mapping):
                raise TypeError(f'{where} must be a dict of options, got '
                                f'{type(options).__name__} {options!r}')
            _check_observer(dict(options, type=name), where)
    if not hasattr(dispatcher, 'dispatch'):  # a dispatcher built already passes
        _check_spec(lambda kind: registered(DISPATCHERS, kind), dispatcher,
                    f'{prefix}dispatcher')
    _check_pass_list(passes, f'{prefix}passes', GRAPH_PASSES, GraphPass)
    _check_pass_list(ptq_passes, f'{prefix}ptq_passes', PTQ_PASSES, PTQPass)
    try:
        build_ptq_passes(ptq_passes)
    except (KeyError, TypeError, ValueError) as error:
        message = error.args[0] if error.args else str(error)
        raise type(error)(f'{prefix}ptq_passes: {message}') from error


def _warn_unused_observer_options(graph: BaseGraph, options: Mapping[str, Any]) -> None:
    """Warn about ``observer_options`` of observers that no config of ``graph`` uses."""
    used = {observer_class(config.dominated_by.observer_algorithm)
            for op in quantable_operations(graph)
            for config in (*op.input_quant_config, *op.output_quant_config)
            if config.state is QuantizationStates.INITIAL and config.master_by is None}
    for name in options:
        if observer_class(name) not in used:
            logger.warning('observer_options: no config of graph %r uses observer %r, so its '
                           'options %s are not used; the observers in use are %s', graph.name,
                           name, dict(options[name]),
                           ', '.join(sorted(cls.__name__ for cls in used)) or 'none')


def set_activation_observer(graph: BaseGraph, observer: _Spec) -> BaseGraph:
    """Calibrate every INITIAL activation config of a quantized graph with ``observer``.

    Weights and passive configs keep their observers (weights: ``minmax``); a set sharing
    one scale that holds an activation takes ``observer``, whichever config is its root
    (a constant added to an activation on TRT_INT8).  Only the
    observer's name is stored in the configs; pass a dict's options to
    :func:`~razorlib.quantization.calibrate` as ``observer_options``.

    Args:
        graph: a graph from :func:`~razorlib.quantization.quantize_graph`, changed in
            place.
        observer: a registered observer (``'minmax'``, ``'percentile'``, ``'kl'``,
            ``'mse'`` or a class name), or a ``dict(type=...)``.

    Returns:
        ``graph``, so calls chain.

    Raises:
        KeyError: no observer has that name; the message lists the registered ones.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.randn(4, 3, 1, 1), is_parameter=True)
        >>> _ = graph.create_operation('Conv', 'conv', inputs=[graph.variables['x'], w],
        ...                            outputs=[graph.create_variable('y')])
        >>> graph = set_activation_observer(quantize_graph(graph, 'ORT_INT8'), 'kl')
        >>> [c.observer_algorithm for c in graph.operations['conv'].input_quant_config]
        ['kl', 'minmax']
    """
    name, _ = split_type(observer, 'observer')
    observer_class(name)
    for op in quantable_operations(graph):
        for config, var in op.config_with_variable:
            # calibration reads the observer of the config's set root, which may be a
            # parameter's (TensorRT's Add of a constant and an activation shares a scale)
            root = config.dominated_by
            if (root.state is QuantizationStates.INITIAL and config.master_by is None
                    and not var.is_parameter):
                root.observer_algorithm = name
    return graph


def prepare_graph(graph: BaseGraph, example_inputs: Any,
                  passes: Sequence[Any] = DEFAULT_PASSES,
                  device: Union[str, torch.device] = 'cpu') -> BaseGraph:
    """Record the graph's shapes and dtypes on ``example_inputs``, then run ``passes``.

    Args:
        graph: a graph straight from ``from_torch`` or ``from_onnx``, changed in place.
        example_inputs: graph inputs for one run (a tensor, a sequence, a dict by name).
        passes: graph passes (names, config dicts or passes), run through a
            :class:`~razorlib.ir.PassManager` until nothing changes (3 rounds at most).
        device: where to run the graph.

    Returns:
        ``graph``, so calls chain.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(),
        ...                           torch.nn.Linear(8 * 6 * 6, 10))
        >>> x = torch.randn(2, 3, 8, 8)
        >>> graph = prepare_graph(from_torch(net, x, exporter='torchscript'), x)
        >>> [op.type for op in graph.operations.values()]
        ['Conv', 'Flatten', 'Gemm']
    """
    TorchExecutor(graph, device).tracing_operation_meta(example_inputs)
    if passes:
        PassManager(passes, steps=3)(graph)
    return graph


def _quantize(graph: BaseGraph, calib_dataloader: Iterable, example_inputs: Any,
              platform: _Platform, calib_steps: int, observer: Optional[_Spec],
              dispatcher: _Spec, dispatching_table: Optional[Union[DispatchingTable, Mapping]],
              collate_fn: Optional[BatchToInputs], device: Union[str, torch.device],
              observer_options: Optional[Mapping[str, Dict[str, Any]]], progress: bool,
              passes: Sequence[Any], ptq_passes: Sequence[Any], function: str) -> BaseGraph:
    # quantize_graph checks too, but after the graph passes and the PTQ passes that run
    # the calibration batches on the float graph: a float16 model is refused before those,
    # and before the first batch is taken as the example (a one-shot iterator keeps it).
    check_float32(graph, function)
    if example_inputs is None:
        example_inputs = next(iter(graph_batches(calib_dataloader, 1, collate_fn)), None)
        if example_inputs is None:
            raise ValueError(f'{function}: the calibration dataloader of graph '
                             f'{graph.name!r} gave no batch; calibration needs at least one')
    options = dict(observer_options or {})
    if observer is not None:
        name, given = split_type(observer, 'observer')
        if given:
            options[name] = {**options.get(name, {}), **given}
    before, after = build_ptq_passes(ptq_passes)
    prepare_graph(graph, example_inputs, passes, device)
    # Batches are checked against the graph's inputs (their number, their dtypes) as
    # they come, so that an error names the batch.
    collate_fn = checked_inputs(graph, collate_fn)
    if before or after:  # the passes run the batches again: take them once
        calib_dataloader = list(graph_batches(calib_dataloader, calib_steps, collate_fn))
        collate_fn = None
    run_ptq_passes(graph, before, calib_dataloader, device)
    quantize_graph(graph, platform, dispatcher, dispatching_table)
    check_quantized_float32(graph, function)
    if observer is not None:
        set_activation_observer(graph, observer)
    _warn_unused_observer_options(graph, options)
    calibrate(graph, calib_dataloader, calib_steps, collate_fn, device, progress, options)
    run_ptq_passes(graph, after, calib_dataloader, device)
    return graph


def _refuse_model(model: Any, function: str, takes: str) -> None:
    """A TypeError for a model ``function`` does not take, pointing at the right call."""
    if isinstance(model, BaseGraph):
        hint = ('quantize a graph with quantize_graph(graph, platform) and then '
                'calibrate(graph, batches); prepare_graph(graph, example_inputs) first records '
                'its shapes and runs the graph passes')
    elif isinstance(model, onnx.ModelProto):
        hint = 'quantize an ONNX model with quantize_onnx_model'
    elif isinstance(model, torch.nn.Module):
        hint = 'quantize a PyTorch model with quantize_torch_model'
    else:
        hint = None
    raise TypeError(f'{function}: model must be {takes}, got {type(model).__name__}'
                    + (f'; {hint}' if hint else ''))


def quantize_torch_model(model: torch.nn.Module, calib_dataloader: Iterable,
                         example_inputs: Any,
                         platform: _Platform = TargetPlatform.TRT_INT8,
                         calib_steps: int = 32, observer: Optional[_Spec] = 'percentile',
                         dispatcher: _Spec = 'conservative',
                         dispatching_table: Optional[Union[DispatchingTable, Mapping]] = None,
                         collate_fn: Optional[BatchToInputs] = None,
                         device: Union[str, torch.device] = 'cpu',
                         observer_options: Optional[Mapping[str, Dict[str, Any]]] = None,
                         progress: bool = True, passes: Sequence[Any] = DEFAULT_PASSES,
                         dynamic_batch: bool = True,
                         ptq_passes: Sequence[Any] = ()) -> BaseGraph:
    """Export, quantize and calibrate a PyTorch model (a slimmed subnet too).

    Args:
        model: the model; exported in eval mode, left unchanged.
        calib_dataloader: any iterable of calibration batches, shaped like
            ``example_inputs`` (any batch size with ``dynamic_batch``).
        example_inputs: a tensor, a tuple of positional arguments or a dict of keyword
            arguments for one forward; the graph's shapes.
        platform: the quantized platform, ``TRT_INT8`` or ``ORT_INT8``.
        calib_steps: how many calibration batches to run at most.
        observer: the observer of every activation (weights use ``minmax``), a name or a
            ``dict(type=..., **options)``; None keeps the platform's (TensorRT
            ``percentile``, ONNX Runtime ``minmax``).
        dispatcher: a name (``conservative``, ``aggressive``, ``pointwise``, ``allin``)
            or a ``dict(type=...)``.
        dispatching_table: ``op name -> platform`` overrides.
        collate_fn: maps a batch to graph inputs; batches are taken as they are when None.
        device: where to calibrate.
        observer_options: observer name -> constructor arguments (also for the weights').
        progress: show a progress bar while calibrating.
        passes: the graph passes run before quantizing (see :data:`DEFAULT_PASSES`).
        dynamic_batch: export axis 0 as a symbolic batch axis (see
            :func:`~razorlib.ir.from_torch`): the graph, its executors and its exported
            ONNX models take any batch size.  False fixes it to the example's.
        ptq_passes: post-training passes that use the calibration batches
            (:mod:`razorlib.quantization.passes`: names or config dicts, such as
            ``dict(type='AdaRound', steps=500)``): ``'float'`` ones run on the FP32 graph
            after ``passes``, the others after calibration, in the order given.

    Returns:
        The quantized, calibrated graph.

    Raises:
        ValueError: the dataloader gives no batch, a batch of a shape the graph does not
            take (the message names the batch and both shapes), or a sequence of another
            length than the graph's inputs (an ``(inputs, labels)`` pair needs a
            ``collate_fn``).
        TypeError: ``model`` is no module (a graph goes to
            :func:`~razorlib.quantization.quantize_graph`), an argument of the wrong type
            or an option a constructor does not take (checked before any work, see
            :func:`check_quantize_arguments`), or a batch of a dtype the graph does not
            take (:class:`~razorlib.ir.executor.shapes.InputDtypeError`); a model that
            computes in float16, bfloat16 or float64, before any batch is run
            (:func:`~razorlib.quantization.state.check_float32`: quantize ``model.float()``),
            or one that casts inside its forward to such a dtype, when the dispatcher
            quantizes an op on the cast tensor, before calibration
            (:func:`~razorlib.quantization.state.check_quantized_float32`).
        KeyError: an observer, dispatcher or pass that is not registered.

    Example:
        >>> from razorlib.quantization import QuantExecutor
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
        ...                           torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 10))
        >>> batches = [torch.randn(4, 3, 8, 8) for _ in range(4)]
        >>> graph = quantize_torch_model(net, batches, batches[0], progress=False,
        ...                              observer=dict(type='PercentileObserver',
        ...                                            percentile=99.9))
        >>> QuantExecutor(graph)(batches[0])[0].shape, QuantExecutor(graph)(
        ...     torch.randn(7, 3, 8, 8))[0].shape
        (torch.Size([4, 10]), torch.Size([7, 10]))
    """
    if not isinstance(model, torch.nn.Module):
        _refuse_model(model, 'quantize_torch_model', 'a torch.nn.Module')
    check_quantize_arguments('', calib_steps, observer, observer_options, dispatcher, passes,
                             ptq_passes, dynamic_batch)
    graph = from_torch(model, example_inputs, dynamic_batch=dynamic_batch)
    return _quantize(graph, calib_dataloader, example_inputs, platform, calib_steps, observer,
                     dispatcher, dispatching_table, collate_fn, device, observer_options,
                     progress, passes, ptq_passes, 'quantize_torch_model')


def quantize_onnx_model(model: Union[onnx.ModelProto, str, os.PathLike],
                        calib_dataloader: Iterable, example_inputs: Any = None,
                        platform: _Platform = TargetPlatform.TRT_INT8,
                        calib_steps: int = 32, observer: Optional[_Spec] = 'percentile',
                        dispatcher: _Spec = 'conservative',
                        dispatching_table: Optional[Union[DispatchingTable, Mapping]] = None,
                        collate_fn: Optional[BatchToInputs] = None,
                        device: Union[str, torch.device] = 'cpu',
                        observer_options: Optional[Mapping[str, Dict[str, Any]]] = None,
                        progress: bool = True,
                        passes: Sequence[Any] = DEFAULT_PASSES,
                        ptq_passes: Sequence[Any] = ()) -> BaseGraph:
    """Read, quantize and calibrate an FP32 ONNX model (a ``ModelProto`` or a file).

    The model's symbolic axes stay symbolic: a model with a ``batch`` axis takes any
    batch size.

    Args:
        model: the ONNX model.
        calib_dataloader: calibration batches; iterated twice when ``example_inputs`` is
            None, so pass a list or a ``DataLoader`` rather than a generator.
        example_inputs: graph inputs (a tensor, a sequence in input order or a dict by
            name) to record shapes and dtypes with; the first batch when None.
        platform: see :func:`quantize_torch_model`, like the arguments below.
        calib_steps: see :func:`quantize_torch_model`.
        observer: see :func:`quantize_torch_model`.
        dispatcher: see :func:`quantize_torch_model`.
        dispatching_table: see :func:`quantize_torch_model`.
        collate_fn: see :func:`quantize_torch_model`.
        device: see :func:`quantize_torch_model`.
        observer_options: see :func:`quantize_torch_model`.
        progress: see :func:`quantize_torch_model`.
        passes: see :func:`quantize_torch_model`.
        ptq_passes: see :func:`quantize_torch_model`.

    Returns:
        The quantized, calibrated graph.

    Raises:
        ValueError: see :func:`quantize_torch_model`, like the errors below.
        TypeError: see :func:`quantize_torch_model`.
        KeyError: see :func:`quantize_torch_model`.

    Example:
        >>> from razorlib.ir import to_onnx
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
        >>> batches = [torch.randn(2, 3, 8, 8) for _ in range(2)]
        >>> proto = to_onnx(from_torch(net, batches[0]))
        >>> graph = quantize_onnx_model(proto, batches, progress=False)
        >>> [op.platform.name for op in graph.operations.values()]
        ['TRT_INT8', 'TRT_INT8']
    """
    if not isinstance(model, (onnx.ModelProto, str, os.PathLike)):
        _refuse_model(model, 'quantize_onnx_model', 'an onnx.ModelProto or a path')
    check_quantize_arguments('', calib_steps, observer, observer_options, dispatcher, passes,
                             ptq_passes)
    graph = from_onnx(model)
    return _quantize(graph, calib_dataloader, example_inputs, platform, calib_steps, observer,
                     dispatcher, dispatching_table, collate_fn, device, observer_options,
                     progress, passes, ptq_passes, 'quantize_onnx_model')
