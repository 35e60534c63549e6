"""QuantExecutor: run a quantized graph with fake quantization at operation boundaries.

Each :class:`~razorlib.ir.QuantableOperation` quantizes its inputs before its kernel runs
and its outputs after, following each config's state:

============================  =========================================================
``ACTIVATED``, ``PASSIVE``    quantize-dequantize with the config's scale and offset
``BAKED``, ``PASSIVE_BAKED``  the parameter holds its quantized value already: as is
``OVERLAPPED``                another config quantizes the tensor (the fused activation)
``INITIAL``, ``FP32``         floating point: as is
============================  =========================================================

An input is not quantized again when the operation that produced it quantized it with the
same config (a dominance set): :func:`quantized_inputs` says which inputs an operation
quantizes itself.  The exporters place their Q/DQ pairs by the same rule, so the executor
and an exported QDQ model compute the same numbers.

An INITIAL config has no scale yet, so a graph never calibrated runs entirely in floating
point: an executor's first run on one warns, or a user who forgot calibration would read
FP32 numbers as the quantized model's.  Calibration runs the uncalibrated graph on
purpose and says so with ``warn_uncalibrated=False``.
"""
from typing import List, Optional, Sequence, Union

import torch

from ..ir import BaseGraph, Operation, QuantableOperation, TensorQuantizationConfig, TorchExecutor
from ..ir.executor.executor import GraphInputs
from .functional import fake_quantize
from .state import check_calibrated, is_uncalibrated, quantable_operations

__all__ = ['QuantExecutor', 'quantized_inputs']

Tensors = List[torch.Tensor]


def _quantized_upstream(op: QuantableOperation, index: int) -> bool:
    """Whether input ``index`` was quantized by its producer with the same config set."""
    var = op.inputs[index]
    source = var.source_op
    if not isinstance(source, QuantableOperation):
        return False
    config = source.output_quant_config[source.outputs.index(var)]
    return config.dominated_by is op.input_quant_config[index].dominated_by


def quantized_inputs(op: Operation) -> List[int]:
    """The inputs ``op`` quantizes itself: quantized configs its producer did not apply.

    Args:
        op: an operation; a plain one quantizes nothing.

    Returns:
        Input indices whose config is quantized (at run time or baked) and whose tensor
        was not quantized with the same dominance set by the operation producing it.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.randn(4, 3, 1, 1), is_parameter=True)
        >>> _ = graph.create_operation('Conv', 'conv', inputs=[graph.variables['x'], w],
        ...                            outputs=[graph.create_variable('y')])
        >>> _ = graph.create_operation('MaxPool', 'pool', {'kernel_shape': [2, 2]},
        ...                            inputs=[graph.variables['y']],
        ...                            outputs=[graph.create_variable('z')])
        >>> graph = quantize_graph(graph, 'TRT_INT8')
        >>> graph = calibrate(graph, [torch.randn(1, 3, 4, 4)], progress=False)
        >>> quantized_inputs(graph.operations['conv']), quantized_inputs(graph.operations['pool'])
        ([0, 1], [])
    """
    if not isinstance(op, QuantableOperation):
        return []
    return [index for index, config in enumerate(op.input_quant_config)
            if config.state.is_quantized and not _quantized_upstream(op, index)]


def _fake_quantized(tensor: torch.Tensor, config: TensorQuantizationConfig) -> torch.Tensor:
    return fake_quantize(tensor, config) if config.state.is_activated else tensor


class QuantExecutor(TorchExecutor):
    """A :class:`~razorlib.ir.TorchExecutor` that fake-quantizes quantable operations.

    Configs are read at every run, so calibration, baking, ``dequantize()`` and
    ``restore_quantize_state()`` take effect without building a new executor.  Operations
    that are not quantable, and quantable ones whose configs are all FP32 or INITIAL, run
    exactly as in :class:`~razorlib.ir.TorchExecutor`.

    Args:
        graph: the graph to run.
        device: where to run it.
        warn_uncalibrated: warn, at the first run, if INITIAL configs would leave their
            tensors in floating point.  Only code that runs an uncalibrated
            graph on purpose (calibration itself) or has warned already turns it off.

    Warns:
        UserWarning: the executor's first run found uncalibrated configs
            (:func:`~razorlib.quantization.state.check_calibrated`: how many, the first
            operations holding them, and to calibrate first).

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.tensor([[1.0, 0.5]]), is_parameter=True)
        >>> fc = graph.create_operation('MatMul', 'fc', inputs=[graph.variables['x'], w],
        ...                             outputs=[graph.create_variable('y')])
        >>> graph.mark_variable_as_graph_output(fc.outputs[0])
        >>> graph = quantize_graph(graph, 'TRT_INT8')
        >>> graph = calibrate(graph, [torch.tensor([[1.27], [-0.5]])], progress=False)
        >>> x, w = graph.operations['fc'].input_quant_config
        >>> y, = graph.operations['fc'].output_quant_config
        >>> round(x.scale.item(), 4), round(y.scale.item(), 4)
        (0.01, 0.01)
        >>> QuantExecutor(graph)(torch.tensor([[0.333]]))  # x -> 0.33, y = [0.33, 0.165]
        [tensor([[0.3300, 0.1700]])]
    """

    def __init__(self, graph: BaseGraph, device: Union[str, torch.device] = 'cpu', *,
                 warn_uncalibrated: bool = True) -> None:
        super().__init__(graph, device)
        self._quantable = quantable_operations(graph)
        self._warn_uncalibrated = warn_uncalibrated

    def forward(self, inputs: GraphInputs,
                output_names: Optional[Sequence[str]] = None) -> List[torch.Tensor]:
        """Run the graph, as :meth:`~razorlib.ir.TorchExecutor.forward`; warns when its
        first run finds configs uncalibrated.

        Checked at the first run, not when built: calibration may come in between.  Not
        on every run: the graph does not lose its scales, and each run would pay for a
        walk over the configs.
        """
        if self._warn_uncalibrated:
            self._warn_uncalibrated = False
            if any(map(is_uncalibrated, self._quantable)):
                check_calibrated(self.graph, 'QuantExecutor')
        return super().forward(inputs, output_names)

    __call__ = forward

    def run_operation(self, op: Operation, inputs: Tensors) -> Tensors:
        """Run ``op`` with its inputs and outputs quantized as its configs say."""
        if not isinstance(op, QuantableOperation):
            return super().run_operation(op, inputs)
        inputs = list(inputs)
        for index in quantized_inputs(op):
            inputs[index] = _fake_quantized(inputs[index], op.input_quant_config[index])
        return self._quantize_outputs(op, super().run_operation(op, inputs))

    def run_operation_alone(self, op: QuantableOperation, inputs: Tensors) -> Tensors:
        """Run ``op`` quantizing every quantized input itself, as if it were alone.

        Inputs its producer would have quantized are quantized here too, so fp32 inputs
        give the output ``op`` computes when it is the only quantized operation.

        Args:
            op: a quantable operation of the graph.
            inputs: its input tensors.

        Returns:
            Its (quantized) outputs.
        """
        inputs = [_fake_quantized(tensor, config) if tensor is not None else None
                  for tensor, config in zip(inputs, op.input_quant_config)]
        return self._quantize_outputs(op, super().run_operation(op, inputs))

    @staticmethod
    def _quantize_outputs(op: QuantableOperation, outputs: Tensors) -> Tensors:
        return [_fake_quantized(tensor, config)
                for tensor, config in zip(outputs, op.output_quant_config)]
