"""Quantization error analysis: signal-to-noise ratios of quantized vs FP32 tensors.

``SNR = 10 log10(sum(x^2) / sum((x - x_q)^2))`` dB, summed over every batch; higher is
better, ``inf`` means no error.  For each quantable operation:

- *layer* SNR: the operation alone quantized, on the FP32 inputs; the error it adds;
- *graph* SNR: its output in the fully quantized graph against the FP32 graph; the error
  accumulated up to it.

And the graph SNR of every graph output.  :meth:`QuantErrorReport.table` prints them
sorted by error, worst first.
"""
import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Union

import torch

from ..ir import BaseGraph, Operation, QuantableOperation
from .batches import BatchToInputs, graph_batches
from .executor import QuantExecutor
from .state import check_calibrated, dequantized, quantable_operations

__all__ = ['LayerError', 'QuantErrorReport', 'SNRMeter', 'analyse_error', 'snr_db']


def snr_db(reference: torch.Tensor, tensor: torch.Tensor) -> float:
    """The signal-to-noise ratio of ``tensor`` against ``reference``, in dB.

    Args:
        reference: the FP32 tensor.
        tensor: the quantized tensor, shaped like ``reference``.

    Returns:
        ``10 log10(sum(reference^2) / sum((reference - tensor)^2))``; ``inf`` when they
        are equal.

    Raises:
        ValueError: the shapes differ (broadcasting would compare other elements).

    Example:
        >>> round(snr_db(torch.tensor([3.0, 4.0]), torch.tensor([3.0, 3.5])), 2)
        20.0
        >>> snr_db(torch.zeros(3, 1), torch.ones(3))
        Traceback (most recent call last):
        ...
        ValueError: SNR of tensors of different shapes: reference (3, 1), tensor (3,); \
they are compared element by element
    """
    meter = SNRMeter()
    meter.update(reference, tensor)
    return meter.db


@dataclass
class SNRMeter:
    """Signal and noise power summed over batches.

    Args:
        signal: the sum of the squared reference values so far.
        noise: the sum of the squared differences so far.

    Example:
        >>> meter = SNRMeter()
        >>> meter.update(torch.tensor([1.0]), torch.tensor([0.9]))
        >>> meter.update(torch.tensor([-1.0]), torch.tensor([-1.1]))
        >>> round(meter.db, 2)
        20.0
    """
    signal: float = 0.0
    noise: float = 0.0

    def update(self, reference: torch.Tensor, tensor: torch.Tensor) -> None:
        """Add one pair of tensors, of one shape (ValueError otherwise)."""
        if tuple(reference.shape) != tuple(tensor.shape):
            raise ValueError(f'SNR of tensors of different shapes: reference '
                             f'{tuple(reference.shape)}, tensor {tuple(tensor.shape)}; they are '
                             'compared element by element')
        reference = reference.detach().double()
        self.signal += float(reference.square().sum())
        self.noise += float((reference - tensor.detach().double()).square().sum())

    @property
    def db(self) -> float:
        """The SNR in dB (``inf`` without noise, ``-inf`` without signal)."""
        if self.noise == 0.0:
            return math.inf
        if self.signal == 0.0:
            return -math.inf
        return 10.0 * math.log10(self.signal / self.noise)


@dataclass(frozen=True)
class LayerError:
    """The SNRs of one quantable operation's outputs.

    Args:
        name: the operation's name.
        op_type: its type.
        layer_snr_db: the operation alone quantized, on FP32 inputs.
        graph_snr_db: in the fully quantized graph.

    Example:
        >>> LayerError('conv', 'Conv', 40.0, 35.5).graph_snr_db
        35.5
    """
    name: str
    op_type: str
    layer_snr_db: float
    graph_snr_db: float


_SORT_KEYS = {'layer': lambda row: row.layer_snr_db, 'graph': lambda row: row.graph_snr_db}


@dataclass
class QuantErrorReport:
    """What :func:`analyse_error` measured.

    Args:
        layers: one row per quantable operation, in topological order.
        outputs: graph output name -> its SNR in dB.

    Example:
        >>> report = QuantErrorReport([LayerError('a', 'Conv', 40.0, 40.0),
        ...                            LayerError('b', 'Gemm', 25.0, 30.0)], {'y': 30.0})
        >>> [row.name for row in report.sorted_layers()]
        ['b', 'a']
        >>> print(report.table())
        layer  type  layer SNR dB  graph SNR dB
        b      Gemm          25.0          30.0
        a      Conv          40.0          40.0
        graph output 'y': 30.0 dB
    """
    layers: List[LayerError] = field(default_factory=list)
    outputs: Dict[str, float] = field(default_factory=dict)

    def sorted_layers(self, by: str = 'layer') -> List[LayerError]:
        """The rows, worst (lowest SNR) first.

        Args:
            by: ``'layer'`` (the error each operation adds) or ``'graph'`` (accumulated).
        """
        if by not in _SORT_KEYS:
            raise ValueError(f"by must be one of {sorted(_SORT_KEYS)}, got {by!r}")
        return sorted(self.layers, key=_SORT_KEYS[by])

    def table(self, by: str = 'layer', top: Optional[int] = None) -> str:
        """The rows as a text table sorted by error, then the graph outputs' SNR.

        Args:
            by: see :meth:`sorted_layers`.
            top: print only the ``top`` worst rows.
        """
        rows = [(row.name, row.op_type, f'{row.layer_snr_db:.1f}', f'{row.graph_snr_db:.1f}')
                for row in self.sorted_layers(by)[:top]]
        header = ('layer', 'type', 'layer SNR dB', 'graph SNR dB')
        widths = [max(len(cells[i]) for cells in [header] + rows) for i in range(4)]
        lines = ['  '.join([cells[0].ljust(widths[0]), cells[1].ljust(widths[1]),
                            cells[2].rjust(widths[2]), cells[3].rjust(widths[3])]).rstrip()
                 for cells in [header] + rows]
        lines += [f'graph output {name!r}: {db:.1f} dB' for name, db in self.outputs.items()]
        return '\n'.join(lines)

    def __str__(self) -> str:
        return self.table()


def _update(meter: SNRMeter, references: Sequence[torch.Tensor],
            tensors: Sequence[torch.Tensor]) -> None:
    for reference, tensor in zip(references, tensors):
        if reference is not None and reference.is_floating_point():
            meter.update(reference, tensor)


def analyse_error(graph: BaseGraph, dataloader: Iterable, steps: int = 8,
                  collate_fn: Optional[BatchToInputs] = None,
                  device: Union[str, torch.device] = 'cpu',
                  progress: bool = False) -> QuantErrorReport:
    """Measure the layer and graph SNR of every quantable operation and graph output.

    Each batch runs the graph dequantized (the FP32 reference, recording each quantable
    operation's inputs and outputs), each quantable operation alone on its FP32 inputs,
    and the quantized graph.  The graph is left as it was.

    Args:
        graph: a calibrated graph.
        dataloader: any iterable of batches.
        steps: how many batches to run at most.
        collate_fn: maps a batch to graph inputs.
        device: where to run.
        progress: show a progress bar.

    Returns:
        The report.

    Raises:
        ValueError: ``dataloader`` gave no batch (there would be nothing to measure).

    Warns:
        UserWarning: the graph has uncalibrated configs
            (:func:`~razorlib.quantization.state.check_calibrated`): their tensors stay in
            floating point, and the SNRs overstate the quantized model.

    Example:
        >>> from razorlib.ir import from_torch
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
        ...                           torch.nn.Conv2d(8, 4, 3))
        >>> batches = [torch.randn(2, 3, 8, 8) for _ in range(2)]
        >>> graph = quantize_graph(from_torch(net, batches[0]), 'TRT_INT8')
        >>> graph = calibrate(graph, batches, progress=False)
        >>> report = analyse_error(graph, batches)
        >>> [row.op_type for row in report.layers], 20 < report.outputs['conv2d_1'] < 60
        (['Conv', 'Relu', 'Conv'], True)
    """
    check_calibrated(graph, 'analyse_error')
    executor = QuantExecutor(graph, device, warn_uncalibrated=False)  # warned just above
    operations = quantable_operations(graph)
    layer = {op: SNRMeter() for op in operations}
    accumulated = {op: SNRMeter() for op in operations}
    outputs = {name: SNRMeter() for name in graph.outputs}
    measured = 0
    for inputs in graph_batches(dataloader, steps, collate_fn, progress):
        measured += 1
        recorded: Dict[Operation, tuple] = {}

        def record(op: Operation, op_inputs: list, op_outputs: list) -> None:
            if isinstance(op, QuantableOperation):
                recorded[op] = (op_inputs, op_outputs)

        def compare(op: Operation, op_inputs: list, op_outputs: list) -> None:
            if op in recorded:
                _update(accumulated[op], recorded[op][1], op_outputs)

        with dequantized(graph):
            references = _run_with_hook(executor, inputs, record)
        for op, (op_inputs, op_outputs) in recorded.items():
            _update(layer[op], op_outputs,
                    executor.run_operation_alone(op, _held_parameters(op, op_inputs)))
        for name, reference, tensor in zip(graph.outputs, references,
                                           _run_with_hook(executor, inputs, compare)):
            _update(outputs[name], [reference], [tensor])
    if not measured:
        raise ValueError('analyse_error: dataloader gave no batch; the SNRs need at least one '
                         f'(got {dataloader!r:.60})')
    return QuantErrorReport(
        [LayerError(op.name, op.type, layer[op].db, accumulated[op].db) for op in operations],
        {name: meter.db for name, meter in outputs.items()})


def _held_parameters(op: QuantableOperation, recorded: list) -> list:
    """``recorded`` (the dequantized run's inputs of ``op``) with each parameter at the
    value the quantized graph holds: a baked weight is stored on its grid and quantized
    no more at run time, so its FP32 value would leave its error out of the layer SNR."""
    return [variable.value.to(tensor.device)
            if tensor is not None and variable.is_parameter and variable.value is not None
            else tensor
            for variable, tensor in zip(op.inputs, recorded)]


def _run_with_hook(executor: QuantExecutor, inputs, hook) -> List[torch.Tensor]:
    handle = executor.register_forward_hook(hook)
    try:
        return executor(inputs)
    finally:
        handle.remove()
