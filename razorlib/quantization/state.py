"""Whole-graph quantization state: bake parameters, dequantize and restore every operation.

:class:`~razorlib.ir.QuantableOperation` swaps one operation's parameter values and
config states; these functions do it for every quantable operation of a graph.  Swaps move
tensors without arithmetic, so a dequantized graph computes its FP32 result bit for bit,
and a restored one its quantized result.
"""
from contextlib import contextmanager
from typing import Iterator, List, Tuple

import torch

from ..ir import BaseGraph, QuantableOperation, QuantizationStates, TensorQuantizationConfig
from ..utils.caller import warn_at_caller
from .functional import fake_quantize

__all__ = ['bake_parameters', 'check_calibrated', 'check_float32', 'check_not_dequantized',
           'check_quantized_float32', 'dequantize_graph', 'dequantized',
           'dequantized_operations', 'is_uncalibrated', 'listed_names', 'quantable_operations',
           'restore_quantize_state', 'uncalibrated_configs', 'uncalibrated_operations']

_OWN_SCALE = (QuantizationStates.INITIAL, QuantizationStates.ACTIVATED, QuantizationStates.BAKED)
"""States of configs calibration gives a scale of their own (not FP32, nor OVERLAPPED or
PASSIVE, which take another config's)."""


def quantable_operations(graph: BaseGraph) -> List[QuantableOperation]:
    """The graph's quantable operations, in topological order.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> quantable_operations(BaseGraph())
        []
    """
    return [op for op in graph.topological_sort() if isinstance(op, QuantableOperation)]


def uncalibrated_configs(graph: BaseGraph) -> Tuple[int, int]:
    """``(uncalibrated, calibrated_or_not)``: how many configs of the graph's quantable
    operations are still INITIAL (configured, never calibrated), and how many calibration
    gives a scale of their own (INITIAL, ACTIVATED or BAKED; not FP32, nor OVERLAPPED or
    PASSIVE, which take another config's).

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> _ = graph.create_operation('Relu', 'relu', inputs=[graph.variables['x']],
        ...                            outputs=[graph.create_variable('y')])
        >>> graph = quantize_graph(graph, 'TRT_INT8')
        >>> uncalibrated_configs(graph)
        (2, 2)
        >>> uncalibrated_configs(calibrate(graph, [torch.randn(4)], progress=False))
        (0, 2)
    """
    configs = [config for op in quantable_operations(graph) for config in _configs(op)
               if config.state in _OWN_SCALE]
    return sum(config.state is QuantizationStates.INITIAL for config in configs), len(configs)


def _configs(op: QuantableOperation) -> List[TensorQuantizationConfig]:
    return op.input_quant_config + op.output_quant_config


def is_uncalibrated(op: QuantableOperation) -> bool:
    """Whether ``op`` has a config still INITIAL: a tensor it would leave in floating point.

    Cheap (no graph walk), so an executor can ask it of its operations at every run.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> _ = graph.create_operation('Relu', 'relu', inputs=[graph.variables['x']],
        ...                            outputs=[graph.create_variable('y')])
        >>> is_uncalibrated(quantize_graph(graph, 'TRT_INT8').operations['relu'])
        True
    """
    return any(config.state is QuantizationStates.INITIAL for config in _configs(op))


def uncalibrated_operations(graph: BaseGraph) -> List[str]:
    """The names of the quantable operations with an uncalibrated (INITIAL) config, in
    topological order: what a message about an uncalibrated graph names.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> uncalibrated_operations(BaseGraph())
        []
    """
    return [op.name for op in quantable_operations(graph) if is_uncalibrated(op)]


_NAMED = 5
"""How many uncalibrated operations :func:`check_calibrated` names."""


def check_calibrated(graph: BaseGraph, action: str, error: bool = False) -> None:
    """Warn (or raise) when ``graph`` has quantization configs never calibrated, naming
    how many and the first operations that hold them.

    An INITIAL config has no scale: the executor, the LSQ module and the exporters leave
    its tensor in floating point, so what ``action`` computes is not the quantized model.
    Every consumer of a calibrated graph calls this one check.

    Args:
        graph: a quantized graph.
        action: what is about to happen, for the message (``'analyse_error'``).
        error: raise instead of warning.

    Raises:
        ValueError: with ``error``, some configs are uncalibrated.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import quantize_graph
        >>> graph = BaseGraph('g')
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> _ = graph.create_operation('Relu', 'relu', inputs=[graph.variables['x']],
        ...                            outputs=[graph.create_variable('y')])
        >>> check_calibrated(quantize_graph(graph, 'TRT_INT8'), 'export_graph', error=True)
        Traceback (most recent call last):
        ...
        ValueError: export_graph: 2 of the 2 quantization configs of graph 'g' are \
uncalibrated (INITIAL, no scale; ops 'relu'), so their tensors would stay in floating \
point; call calibrate() first (quantize_torch_model and quantize_onnx_model calibrate)
    """
    uncalibrated, total = uncalibrated_configs(graph)
    if not uncalibrated:
        return
    message = (f'{action}: {uncalibrated} of the {total} quantization configs of graph '
               f'{graph.name!r} are uncalibrated (INITIAL, no scale; ops '
               f'{listed_names(uncalibrated_operations(graph))}), so their '
               'tensors would stay in floating point; call calibrate() first '
               '(quantize_torch_model and quantize_onnx_model calibrate)')
    if error:
        raise ValueError(message)
    warn_at_caller(message)


def dequantized_operations(graph: BaseGraph) -> List[str]:
    """The names of the quantable operations left dequantized (``op.dequantize()``,
    :func:`dequantize_graph`), in topological order.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> dequantized_operations(BaseGraph())
        []
    """
    return [op.name for op in quantable_operations(graph) if op.is_dequantized]


def check_not_dequantized(graph: BaseGraph, action: str) -> None:
    """Refuse a graph with operations left dequantized, naming them.

    A dequantized operation computes in floating point with its fp32 parameters, and its
    configs say FP32: an export would write it with no Q/DQ pair and ``LSQGraph`` would
    learn no scale for it, so the "quantized" model would be partly (or wholly) the FP32
    one, without a word.  A layer kept in floating point on purpose is not dequantized:
    ``keep_in_float`` and ``MixedPrecision`` give it FP32 configs of its own.

    Args:
        graph: a quantized graph.
        action: what is refused, for the message (``'export_qdq_onnx'``).

    Raises:
        ValueError: naming the first dequantized operations.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> graph = BaseGraph('g')
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> _ = graph.create_operation('Relu', 'relu', inputs=[graph.variables['x']],
        ...                            outputs=[graph.create_variable('y')])
        >>> graph = calibrate(quantize_graph(graph, 'TRT_INT8'), [torch.randn(4)],
        ...                   progress=False)
        >>> check_not_dequantized(dequantize_graph(graph), 'export_graph')
        Traceback (most recent call last):
        ...
        ValueError: export_graph: graph 'g' has 1 operation(s) left dequantized ('relu'), \
which would compute in floating point in a model given as quantized; call \
restore_quantize_state(graph) (or leave the `with dequantized(graph):` block) first, or keep \
a layer in floating point on purpose with keep_in_float(op) or the MixedPrecision pass
    """
    names = dequantized_operations(graph)
    if names:
        raise ValueError(f'{action}: graph {graph.name!r} has {len(names)} operation(s) left '
                         f'dequantized ({listed_names(names)}), which would compute in floating '
                         'point in a model given as quantized; call restore_quantize_state('
                         'graph) (or leave the `with dequantized(graph):` block) first, or keep '
                         'a layer in floating point on purpose with keep_in_float(op) or the '
                         'MixedPrecision pass')


def check_float32(graph: BaseGraph, action: str) -> None:
    """Refuse a graph that computes in another floating type than float32 (a model
    ``.half()``-ed, ``.bfloat16()``-ed or ``.double()``-d), naming its dtypes and tensors.

    Quantization works in float32: the scales are float32 and ONNX's QuantizeLinear takes
    them with float32 tensors only (a float16 model's QDQ export would not load in
    onnxruntime), and the int32 integers of an ONNX Runtime bias do not fit half precision
    (float16 calibration would fail with a bare "cannot be converted to c10::Half", bfloat16
    round them).  Checked on the graph inputs (a double model takes double inputs) and
    parameters (half precision ones; a float32 model's float64 constant, such as a shape
    computation's, is not quantized and exports as it is), before any batch is run:
    every quantization goes through ``quantize_graph``, and ``quantize_torch_model`` /
    ``quantize_onnx_model`` check first, before their graph passes and PTQ passes.

    Args:
        graph: the graph to quantize.
        action: what is refused, for the message (``'quantize_graph'``).

    Raises:
        TypeError: a floating graph input or parameter is not float32.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph('g')
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x', dtype=torch.half))
        >>> check_float32(graph, 'quantize_graph')
        Traceback (most recent call last):
        ...
        TypeError: quantize_graph: graph 'g' computes in torch.float16 (inputs and \
parameters 'x'); razorlib quantizes float32 models only (QuantizeLinear takes its float32 \
scales with float32 tensors only, and int32 biases do not fit half precision): quantize \
model.float() with float32 example_inputs (an ONNX model exported in float32); float16 and \
bfloat16 calibration batches are widened to float32 exactly
    """
    dtypes, names = set(), []
    for var in graph.variables.values():
        if var.name in graph.inputs:  # a double model takes double inputs
            refused = var.dtype is not None and var.dtype.is_floating_point and \
                var.dtype != torch.float32
            dtype = var.dtype
        elif var.is_parameter and var.value is not None:
            # not a float32 model's float64 constant (a shape computation's): it exports
            dtype = var.value.dtype
            refused = dtype in (torch.float16, torch.bfloat16)
        else:
            continue
        if refused:
            dtypes.add(str(dtype))
            names.append(var.name)
    if names:
        raise TypeError(f'{action}: graph {graph.name!r} computes in {", ".join(sorted(dtypes))} '
                        f'(inputs and parameters {listed_names(names)}); razorlib quantizes '
                        'float32 models only (QuantizeLinear takes its float32 scales with '
                        'float32 tensors only, and int32 biases do not fit half precision): '
                        'quantize model.float() with float32 example_inputs (an ONNX model '
                        'exported in float32); float16 and bfloat16 calibration batches are '
                        'widened to float32 exactly')


def check_quantized_float32(graph: BaseGraph, action: str) -> None:
    """Refuse a graph whose quantable operations quantize a tensor of another floating type
    than float32, naming the operations, their tensors and the dtypes.

    A float32 model that casts inside its forward (``x.half()``, ``x.to(torch.float16)``
    before ops that compute on it) passes :func:`check_float32`: its inputs and parameters
    are float32.  The conservative dispatcher keeps ops after a Cast in FP32, but the
    ``aggressive`` and ``allin`` ones, or a ``dispatching_table``, quantize them, and the QDQ
    export then gives a float16 tensor a float32 scale: onnxruntime and TensorRT do not load
    it.  Checked after dispatching (the dtypes are recorded, the quantized tensors known):
    by ``quantize_torch_model`` and ``quantize_onnx_model`` right after ``quantize_graph``,
    before calibration, and by ``export_qdq_onnx`` (``export_graph``'s ``QDQ_ONNX``) before
    anything is written, for a graph quantized with ``quantize_graph`` and ``calibrate``
    directly.  Not by ``quantize_graph`` itself: it would refuse after changing the
    caller's graph.

    Args:
        graph: a quantized graph, with its dtypes recorded (``prepare_graph``; or
            ``calibrate``, for the tensors it observes that have none).
        action: what is refused, for the message (``'quantize_torch_model'``).

    Raises:
        TypeError: naming the first operations that quantize such a tensor.

    Example:
        >>> from razorlib.quantization import quantize_graph
        >>> graph = BaseGraph('g')
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> half = graph.create_variable('h', dtype=torch.half)
        >>> _ = graph.create_operation('Cast', 'cast', inputs=[graph.variables['x']],
        ...                            outputs=[half], attributes=dict(to=10))
        >>> _ = graph.create_operation('Relu', 'relu', inputs=[half],
        ...                            outputs=[graph.create_variable('y', dtype=torch.half)])
        >>> check_quantized_float32(quantize_graph(graph, 'TRT_INT8', 'aggressive'), 'export')
        Traceback (most recent call last):
        ...
        TypeError: export: graph 'g' quantizes tensors of another dtype than float32 (op \
'relu' (Relu) on 'h' torch.float16, 'y' torch.float16): the model casts inside its forward, \
and QuantizeLinear takes its float32 scales with float32 tensors only, so the QDQ model \
would not load; keep these ops in floating point (dispatcher='conservative', or \
dispatching_table={'relu': 'FP32'}) or cast to float32 before them
    """
    found = []
    for op in quantable_operations(graph):
        tensors = list(dict.fromkeys(  # an Add of x and x names x once
            f'{var.name!r} {var.dtype}' for config, var in op.config_with_variable
            if config.state is not QuantizationStates.FP32 and var.dtype is not None
            and var.dtype.is_floating_point and var.dtype != torch.float32))
        if tensors:
            found.append((op, tensors))
    if found:
        shown = found[:_NAMED]
        ops = '; '.join(f'op {op.name!r} ({op.type}) on {", ".join(tensors)}'
                        for op, tensors in shown) + ('; ...' if len(found) > _NAMED else '')
        table = ', '.join(f"{op.name!r}: 'FP32'" for op, _ in shown)
        raise TypeError(f'{action}: graph {graph.name!r} quantizes tensors of another dtype '
                        f'than float32 ({ops}): the model casts inside its forward, and '
                        'QuantizeLinear takes its float32 scales with float32 tensors only, so '
                        "the QDQ model would not load; keep these ops in floating point "
                        f"(dispatcher='conservative', or dispatching_table={{{table}}}) or cast "
                        'to float32 before them')


def listed_names(names: List[str]) -> str:
    """The first :data:`_NAMED` names, quoted, for a message about them.

    Example:
        >>> listed_names(['a', 'b', 'c', 'd', 'e', 'f'])
        "'a', 'b', 'c', 'd', 'e', ..."
    """
    return ', '.join(map(repr, names[:_NAMED])) + (', ...' if len(names) > _NAMED else '')


def bake_parameters(graph: BaseGraph) -> BaseGraph:
    """Replace every calibrated parameter by its fake-quantized value, once.

    ACTIVATED parameters become BAKED and PASSIVE ones (biases) PASSIVE_BAKED; their fp32
    values are kept aside for :func:`dequantize_graph`.  The executor then reads the
    baked values as they are instead of quantizing them at every run.

    Args:
        graph: a calibrated graph, changed in place.

    Returns:
        ``graph``, so calls chain.

    Example:
        >>> import torch
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.tensor([[0.333], [-1.27]]), is_parameter=True)
        >>> fc = graph.create_operation('MatMul', 'fc', inputs=[graph.variables['x'], w],
        ...                             outputs=[graph.create_variable('y')])
        >>> graph = quantize_graph(graph, 'TRT_INT8')
        >>> graph = calibrate(graph, [torch.randn(4, 2)], progress=False)
        >>> graph = bake_parameters(graph)
        >>> w.value, graph.operations['fc'].input_quant_config[1].state.name
        (tensor([[ 0.3300],
                [-1.2700]]), 'BAKED')
    """
    for op in quantable_operations(graph):
        op.baking_parameters(fake_quantize)
    return graph


def dequantize_graph(graph: BaseGraph, parameter_only: bool = False) -> BaseGraph:
    """Dequantize every quantable operation: fp32 parameters back, configs FP32.

    Args:
        graph: the graph, changed in place.
        parameter_only: see :meth:`~razorlib.ir.QuantableOperation.dequantize`.

    Returns:
        ``graph``, so calls chain.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.tensor([[0.333], [-1.27]]), is_parameter=True)
        >>> _ = graph.create_operation('MatMul', 'fc', inputs=[graph.variables['x'], w],
        ...                            outputs=[graph.create_variable('y')])
        >>> graph = quantize_graph(graph, 'TRT_INT8')
        >>> graph = calibrate(graph, [torch.randn(4, 2)], progress=False)
        >>> graph = bake_parameters(graph)
        >>> graph = dequantize_graph(graph)
        >>> round(w.value[0].item(), 4), graph.operations['fc'].input_quant_config[1].state.name
        (0.333, 'FP32')
        >>> graph = restore_quantize_state(graph)
        >>> round(w.value[0].item(), 4), graph.operations['fc'].input_quant_config[1].state.name
        (0.33, 'BAKED')
    """
    for op in quantable_operations(graph):
        op.dequantize(parameter_only=parameter_only)
    return graph


def restore_quantize_state(graph: BaseGraph) -> BaseGraph:
    """Undo :func:`dequantize_graph` (and any operation's ``dequantize``).

    Args:
        graph: the graph, changed in place.

    Returns:
        ``graph``, so calls chain.

    Example:
        See :func:`dequantize_graph`.
    """
    for op in quantable_operations(graph):
        op.restore_quantize_state()
    return graph


@contextmanager
def dequantized(graph: BaseGraph) -> Iterator[BaseGraph]:
    """Run the block on the graph dequantized; the operations it dequantized are restored.

    Args:
        graph: the graph.

    Yields:
        ``graph``.

    Example:
        >>> import torch
        >>> from razorlib.quantization import QuantExecutor, quantize_torch_model
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
        >>> x = torch.randn(1, 3, 8, 8)
        >>> graph = quantize_torch_model(net, [x], x, progress=False)
        >>> with dequantized(graph):
        ...     fp32 = QuantExecutor(graph)(x)[0]
        >>> torch.allclose(fp32, net(x), atol=1e-6)
        True
        >>> any(op.is_dequantized for op in graph.operations.values())
        False
    """
    switched = [op for op in quantable_operations(graph) if not op.is_dequantized]
    for op in switched:
        op.dequantize()
    try:
        yield graph
    finally:
        for op in switched:
            op.restore_quantize_state()
    return graph
