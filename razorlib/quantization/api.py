"""One-call post-training quantization of a PyTorch model or an ONNX model.

``quantize_torch_model`` exports the model (:func:`~razorlib.ir.from_torch`),
``quantize_onnx_model`` reads the ONNX model (:func:`~razorlib.ir.from_onnx`); both then
record shapes and dtypes, dispatch and quantize for the platform
(:func:`~razorlib.quantization.quantize_graph`), set the activations' observer and
calibrate (:func:`~razorlib.quantization.calibrate`).  The graph that comes back runs
quantized in a :class:`~razorlib.quantization.QuantExecutor` and exports with
:func:`~razorlib.quantization.export_graph`.

The exported graph has the shapes of the example inputs fixed, so the calibration batches
must have those shapes too.
"""
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Union

import onnx
import torch

from ..ir import BaseGraph, QuantizationStates, TorchExecutor, from_onnx, from_torch
from .batches import BatchToInputs, graph_batches
from .calibration import calibrate
from .dispatch import DispatchingTable
from .observers import OBSERVERS
from .platform import TargetPlatform
from .quantize import quantize_graph
from .state import quantable_operations

__all__ = ['quantize_onnx_model', 'quantize_torch_model', 'set_activation_observer']

_Platform = Union[TargetPlatform, str]


def set_activation_observer(graph: BaseGraph, observer: str) -> int:
    """Calibrate every INITIAL activation config of a quantized graph with ``observer``.

    Weights and passive configs keep their observers (weights: ``minmax``).

    Args:
        graph: a graph from :func:`~razorlib.quantization.quantize_graph`.
        observer: a registered observer name (``minmax``, ``percentile``, ``kl``, ``mse``).

    Returns:
        How many configs were set.

    Raises:
        ValueError: no observer has that name.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.randn(4, 3, 1, 1), is_parameter=True)
        >>> _ = graph.create_operation('Conv', 'conv', inputs=[graph.variables['x'], w],
        ...                            outputs=[graph.create_variable('y')])
        >>> graph = quantize_graph(graph, 'ORT_INT8')
        >>> set_activation_observer(graph, 'kl')
        2
        >>> [c.observer_algorithm for c in graph.operations['conv'].input_quant_config]
        ['kl', 'minmax']
    """
    OBSERVERS.lookup(observer)
    count = 0
    for op in quantable_operations(graph):
        for config, var in op.config_with_variable:
            if (config.state is QuantizationStates.INITIAL and config.master_by is None
                    and not var.is_parameter):
                config.observer_algorithm = observer
                count += 1
    return count


def _quantize(graph: BaseGraph, calib_dataloader: Iterable, example_inputs: Any,
              platform: _Platform, calib_steps: int, observer: Optional[str],
              dispatcher: str, dispatching_table: Optional[Union[DispatchingTable, Mapping]],
              collate_fn: Optional[BatchToInputs], device: Union[str, torch.device],
              observer_options: Optional[Mapping[str, Dict[str, Any]]],
              progress: bool) -> BaseGraph:
    TorchExecutor(graph, device).tracing_operation_meta(example_inputs)
    quantize_graph(graph, platform, dispatcher, dispatching_table)
    if observer is not None:
        set_activation_observer(graph, observer)
    calibrate(graph, calib_dataloader, calib_steps, collate_fn, device, progress,
              observer_options)
    return graph


def quantize_torch_model(model: torch.nn.Module, calib_dataloader: Iterable,
                         example_inputs: Any,
                         platform: _Platform = TargetPlatform.TRT_INT8,
                         calib_steps: int = 32, observer: Optional[str] = 'percentile',
                         dispatcher: str = 'conservative',
                         dispatching_table: Optional[Union[DispatchingTable, Mapping]] = None,
                         collate_fn: Optional[BatchToInputs] = None,
                         device: Union[str, torch.device] = 'cpu',
                         observer_options: Optional[Mapping[str, Dict[str, Any]]] = None,
                         progress: bool = True) -> BaseGraph:
    """Export, quantize and calibrate a PyTorch model (a slimmed subnet too).

    Args:
        model: the model; exported in eval mode, left unchanged.
        calib_dataloader: any iterable of calibration batches, shaped like
            ``example_inputs``.
        example_inputs: a tensor, a tuple of positional arguments or a dict of keyword
            arguments for one forward; the graph's shapes.
        platform: the quantized platform, ``TRT_INT8`` or ``ORT_INT8``.
        calib_steps: how many calibration batches to run at most.
        observer: the observer of every activation (weights use ``minmax``); None keeps
            the platform's (TensorRT ``percentile``, ONNX Runtime ``minmax``).
        dispatcher: ``conservative``, ``aggressive``, ``pointwise`` or ``allin``.
        dispatching_table: ``op name -> platform`` overrides.
        collate_fn: maps a batch to graph inputs; batches are taken as they are when None.
        device: where to calibrate.
        observer_options: observer name -> constructor arguments.
        progress: show a progress bar while calibrating.

    Returns:
        The quantized, calibrated graph.

    Example:
        >>> from razorlib.quantization import QuantExecutor
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
        ...                           torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 10))
        >>> batches = [torch.randn(4, 3, 8, 8) for _ in range(4)]
        >>> graph = quantize_torch_model(net, batches, batches[0], progress=False)
        >>> QuantExecutor(graph)(batches[0])[0].shape
        torch.Size([4, 10])
    """
    graph = from_torch(model, example_inputs)
    return _quantize(graph, calib_dataloader, example_inputs, platform, calib_steps, observer,
                     dispatcher, dispatching_table, collate_fn, device, observer_options,
                     progress)


def quantize_onnx_model(model: Union[onnx.ModelProto, str, os.PathLike],
                        calib_dataloader: Iterable, example_inputs: Any = None,
                        platform: _Platform = TargetPlatform.TRT_INT8,
                        calib_steps: int = 32, observer: Optional[str] = 'percentile',
                        dispatcher: str = 'conservative',
                        dispatching_table: Optional[Union[DispatchingTable, Mapping]] = None,
                        collate_fn: Optional[BatchToInputs] = None,
                        device: Union[str, torch.device] = 'cpu',
                        observer_options: Optional[Mapping[str, Dict[str, Any]]] = None,
                        progress: bool = True) -> BaseGraph:
    """Read, quantize and calibrate an FP32 ONNX model (a ``ModelProto`` or a file).

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

    Returns:
        The quantized, calibrated graph.

    Example:
        >>> from razorlib.ir import to_onnx
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
        >>> batches = [torch.randn(2, 3, 8, 8) for _ in range(2)]
        >>> proto = to_onnx(from_torch(net, batches[0]))
        >>> graph = quantize_onnx_model(proto, batches, progress=False)
        >>> [op.platform.name for op in graph.operations.values()]
        ['TRT_INT8', 'TRT_INT8']
    """
    graph = from_onnx(model)
    if example_inputs is None:
        example_inputs = next(iter(graph_batches(calib_dataloader, 1, collate_fn)))
    return _quantize(graph, calib_dataloader, example_inputs, platform, calib_steps, observer,
                     dispatcher, dispatching_table, collate_fn, device, observer_options,
                     progress)
