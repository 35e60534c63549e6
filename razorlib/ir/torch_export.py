"""from_torch: a PyTorch model -> ONNX (``torch.onnx.export``) -> a :class:`BaseGraph`.

The torch.export-based exporter (``dynamo=True``, with onnxscript's optimizer: constant
folding, Conv+BatchNorm fusion, no shape subgraphs for static shapes) is tried first;
the TorchScript-based exporter (``dynamo=False``, with constant folding) is the
fallback.  Which one built the graph is logged and kept in
``graph.extension_attrib['exporter']`` (``'dynamo'`` or ``'torchscript'``); the
fallback is logged as a warning, with the dynamo exporter's error.  With
``dynamic_batch=True`` axis 0 of every tensor input is exported as the symbolic axis
``'batch'``, which the graph (and every ONNX model written from it) keeps.
"""
import inspect
import io
import logging
from collections.abc import Mapping
from typing import Any, Dict, List, Optional, Tuple

import onnx
import torch

from ..utils.modes import evaluating
from .graph import BaseGraph
from .onnx_io import from_onnx

logger = logging.getLogger(__name__)

__all__ = ['BATCH_AXIS', 'EXPORTERS', 'from_torch']

BATCH_AXIS = 'batch'
"""The name of the symbolic batch axis of a graph exported with ``dynamic_batch=True``."""

EXPORTERS = ('dynamo', 'torchscript')
"""The exporters ``from_torch`` can use, in the order ``exporter='auto'`` tries them."""


def from_torch(model: torch.nn.Module, example_inputs: Any, exporter: str = 'auto',
               opset_version: Optional[int] = None, dynamic_batch: bool = False) -> BaseGraph:
    """Export a model to ONNX with ``torch.onnx.export`` and build its graph.

    The model is exported in eval mode (its mode is restored afterwards), with the
    shapes of ``example_inputs`` fixed, except axis 0 of every tensor input with
    ``dynamic_batch``.  Graph inputs follow the forward arguments, in the order of
    ``forward``'s parameters (keyword inputs too), and graph outputs the flattened outputs
    (``torch.utils._pytree`` order).

    Args:
        model: the model.
        example_inputs: a tensor, a tuple of positional arguments (a dict among them,
            the last one included, is a positional argument) or a dict of keyword
            arguments for one forward.
        exporter: ``'dynamo'``, ``'torchscript'``, or ``'auto'`` (dynamo, falling back to
            torchscript when it fails).
        opset_version: the ONNX opset; the exporter's default when None.
        dynamic_batch: export axis 0 of the tensor inputs as the symbolic axis
            :data:`BATCH_AXIS`; executors and exported ONNX models then take any batch
            size.

    Returns:
        The graph; ``graph.extension_attrib['exporter']`` names the exporter used.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
        ...                           torch.nn.ReLU())
        >>> graph = from_torch(net, torch.randn(1, 3, 8, 8))
        >>> graph.extension_attrib['exporter'], [op.type for op in graph.operations.values()]
        ('dynamo', ['Conv', 'Relu'])
        >>> from_torch(net, torch.randn(1, 3, 8, 8), dynamic_batch=True).inputs['input'].shape
        ('batch', 3, 8, 8)
    """
    if exporter not in ('auto', *EXPORTERS):
        raise ValueError(f"exporter must be 'auto' or one of {EXPORTERS}, got {exporter!r}")
    args, kwargs = _arguments(model, example_inputs)
    with evaluating(model):
        proto, used = _export(model, args, kwargs, exporter, opset_version, dynamic_batch)
    graph = from_onnx(proto)
    graph.extension_attrib['exporter'] = used
    logger.info('from_torch: %s exported with the %s exporter (%d operations)',
                type(model).__name__, used, len(graph.operations))
    return graph


def _arguments(model: torch.nn.Module, example_inputs: Any) -> Tuple[tuple, Dict[str, Any]]:
    """The positional and keyword arguments, the keywords in the order of ``forward``'s
    parameters (any it does not name after them, as given).

    The dynamo exporter makes graph inputs in the order the keywords come and the
    TorchScript one in the signature's; ``exporter='auto'`` may end up with either, and
    graph inputs are fed by position.
    """
    if isinstance(example_inputs, Mapping):
        order = {name: index for index, name in
                 enumerate(inspect.signature(model.forward).parameters)}
        return (), dict(sorted(example_inputs.items(),
                               key=lambda item: order.get(item[0], len(order))))
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs), {}
    return (example_inputs, ), {}


def _export(model: torch.nn.Module, args: tuple, kwargs: Dict[str, Any], exporter: str,
            opset_version: Optional[int], dynamic_batch: bool) -> Tuple[onnx.ModelProto, str]:
    if exporter == 'torchscript':
        return _torchscript(model, args, kwargs, opset_version, dynamic_batch), 'torchscript'
    try:
        program = torch.onnx.export(
            model, _with_keywords(args, kwargs), dynamo=True, optimize=True,
            opset_version=opset_version, verbose=False,
            dynamic_shapes=_batch_shapes(model, args, kwargs) if dynamic_batch else None)
        return program.model_proto, 'dynamo'
    except Exception as error:  # the exporter raises many types; all mean "fall back"
        if exporter == 'dynamo':
            raise
        logger.warning('from_torch: the dynamo exporter failed on %s (%s: %s); falling back '
                       'to the torchscript exporter', type(model).__name__,
                       type(error).__name__, error)
    return _torchscript(model, args, kwargs, opset_version, dynamic_batch), 'torchscript'


def _with_keywords(args: tuple, kwargs: Dict[str, Any]) -> tuple:
    """``args`` for ``torch.onnx.export``, ending in the dict of keyword arguments.

    Both exporters read a dict that ends ``args`` (when no ``kwargs`` is given) as the
    keyword arguments, so a dict that is the last positional argument needs one after
    it, even an empty one (torch.onnx's documented convention).
    """
    return args + (kwargs, )


def _batch_shapes(model: torch.nn.Module, args: tuple, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """torch.export's ``dynamic_shapes``: axis 0 of every tensor argument is one Dim."""
    batch = torch.export.Dim(BATCH_AXIS)
    bound = inspect.signature(model.forward).bind(*args, **kwargs).arguments
    return {name: torch.utils._pytree.tree_map(
        lambda leaf: {0: batch} if isinstance(leaf, torch.Tensor) and leaf.dim() else None,
        value) for name, value in bound.items()}


def _tensor_names(args: tuple, kwargs: Dict[str, Any]) -> List[str]:
    """Names for the TorchScript exporter's inputs, one per tensor, in argument order."""
    leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    return [f'input_{index}' if index else 'input'
            for index in range(sum(isinstance(leaf, torch.Tensor) for leaf in leaves))]


def _torchscript(model: torch.nn.Module, args: tuple, kwargs: Dict[str, Any],
                 opset_version: Optional[int], dynamic_batch: bool) -> onnx.ModelProto:
    buffer = io.BytesIO()
    names = _tensor_names(args, kwargs) if dynamic_batch else None
    torch.onnx.export(model, _with_keywords(args, kwargs), buffer, dynamo=False,
                      do_constant_folding=True, opset_version=opset_version, input_names=names,
                      dynamic_axes={name: {0: BATCH_AXIS} for name in names} if names else None)
    return onnx.load_from_string(buffer.getvalue())
