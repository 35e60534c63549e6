"""ActivationCentering: centre a ReLU6 output on zero, so a symmetric quantizer uses all of
its steps.

TensorRT's INT8 activations are symmetric (zero point 0).  A ReLU6 output lies in
``[0, 6]``: quantized with range ``r`` it uses the codes 0..127 and never -127..-1, one
bit of the eight, where onnxruntime's asymmetric uint8 would use all 256.  The shift
``clip(y, 0, h) - c = clip(y - c, -c, h - c)`` moves it by a constant at no cost: the
layer before the Clip takes ``-c`` into its bias and the Clip's bounds become
``(-c, h - c)`` (still one Clip after the convolution, as ReLU6 was), and
each reader that is linear in its input and reads no padding (a Conv with zero pads, a
Gemm) takes it back into its bias: ``W (x - c) + b + c W 1 = W x + b``.  The FP32 graph
computes what it did.  With ``c = r / 2`` and half the scale, the calibrated range
``[0, r]`` maps onto the codes -127..127: the same range at twice the resolution, and 0
(most of a ReLU6 output) still lands on a code exactly (-127), so the rounding noise of
the tensor falls by a factor of 4 (6 dB).  It is onnxruntime's unsigned format, kept in
TensorRT's signed one.

A reader with zero padding (a 3x3 depthwise conv with ``pads=1``, as after MobileNetV2's
expansion) would see its padded zeros as ``x = c``, so its output at the borders would
change.  By default such tensors are left as they are.  With ``explicit_pads=True`` the
padding moves out of the convolution into a ``Pad`` of the centred tensor whose value is
``-c`` (the shifted zero, code -127 exactly), and the convolution, now unpadded, takes the
shift into its bias like any other reader: ``conv(pad(x - c, -c)) = conv(pad(x, 0)) - c W
1``.  The Pad shares the tensor's scale.  It costs a separate padding step where the
engine would have fused zero padding into the convolution.  Tensors read by anything
else, graph outputs, and tensors whose quantizer is not symmetric (onnxruntime's uint8
already uses every code) are left.  On MobileNetV2 the default centres the outputs of the
depthwise convs (read by the 1x1 projections), half of its ReLU6 tensors; with explicit
pads, the expansions' outputs too.
"""
import logging
from typing import List, Optional, Tuple

import torch

from ...ir import (BaseGraph, Operation, OperationQuantizationConfig, PassResult,
                   QuantableOperation, TensorQuantizationConfig)
from ...registry import PTQ_PASSES
from ..functional import fake_quantize
from ..lsq import follow_passive_scales
from ..quantizers.formats import fp32_config
from .base import PTQPass, name_list
from .layers import clip_from_zero, is_channel_layer, sole_reader

logger = logging.getLogger(__name__)

__all__ = ['ActivationCentering', 'centerable_clips']


def _has_bias(op: Operation) -> bool:
    """Whether ``op`` has a parameter bias with one value per output channel, which it
    adds (a Gemm's ``beta`` is not 0)."""
    if len(op.inputs) < 3 or not op.inputs[2].is_parameter or op.inputs[2].value is None:
        return False
    if op.type == 'Gemm' and _bias_factor(op) == 0.0:
        return False
    weight = op.inputs[1].value
    outputs = (weight.shape[0] if op.type == 'Conv' or op.attributes.get('transB', 0)
               else weight.shape[1])
    return op.inputs[2].value.numel() == outputs


def _absorbs_shift(op: Operation, var, explicit_pads: bool = False) -> bool:
    """Whether ``op`` reads ``var`` as a data input it is linear in and has a bias to take
    the shift back: a Gemm, or a Conv with no padding (with ``explicit_pads``, or with
    explicit zero ``pads`` that may move into a Pad of the shifted value)."""
    if not (is_channel_layer(op) and _has_bias(op) and op.inputs[0] is var
            and all(other is not var for other in op.inputs[1:])):
        return False
    if op.type == 'Gemm':
        return True
    auto_pad = op.attributes.get('auto_pad', 'NOTSET')
    if auto_pad == 'VALID':
        return True
    pads = op.attributes.get('pads', ())
    return auto_pad == 'NOTSET' and (explicit_pads or not any(int(pad) for pad in pads))


def centerable_clips(graph: BaseGraph, explicit_pads: bool = False
                     ) -> List[Tuple[Operation, Operation, List[Operation]]]:
    """Every ``(producer, clip, readers)`` whose Clip output may be shifted: a
    ``Clip(0, high)`` with parameter bounds that no other op reads, the sole reader of a
    weight layer with a bias (``producer``), whose output is no graph output and is read
    only by weight layers that absorb a shift (``readers``: Conv without padding, or with
    explicit zero pads when ``explicit_pads``; Gemm; each with a bias).

    Example:
        >>> import torch
        >>> from razorlib.ir import from_torch
        >>> from razorlib.quantization import prepare_graph
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.ReLU6(),
        ...                           torch.nn.Conv2d(4, 4, 3, padding=1, groups=4),
        ...                           torch.nn.ReLU6(), torch.nn.Conv2d(4, 2, 1))
        >>> x = torch.randn(1, 3, 4, 4)
        >>> graph = prepare_graph(from_torch(net, x), x)  # each Clip its own bounds
        >>> [(p.type, len(r)) for p, _, r in centerable_clips(graph)]  # not the padded one
        [('Conv', 1)]
        >>> len(centerable_clips(graph, explicit_pads=True))  # its padding may move out
        2
    """
    found = []
    for clip in graph.topological_sort():
        if clip_from_zero(clip) is None:
            continue
        producer = clip.inputs[0].source_op
        var = clip.outputs[0]
        if (producer is None or not is_channel_layer(producer) or not _has_bias(producer)
                or sole_reader(graph, producer) is not clip or var.name in graph.outputs
                or not var.dest_ops or not all(  # bounds this Clip alone reads: they move
                    bound.is_parameter and bound.dest_ops == [clip] for bound in clip.inputs[1:])):
            continue
        if all(_absorbs_shift(reader, var, explicit_pads) for reader in var.dest_ops):
            found.append((producer, clip, list(var.dest_ops)))
    return found


def _conv_pads(op: Operation) -> List[int]:
    """A Conv's explicit ``pads`` (begins, then ends), all 0 for a Gemm or no padding."""
    if op.type != 'Conv' or op.attributes.get('auto_pad', 'NOTSET') != 'NOTSET':
        return []
    return [int(pad) for pad in op.attributes.get('pads', ())]


def _move_padding(graph: BaseGraph, reader: Operation, value: float,
                  root: TensorQuantizationConfig) -> None:
    """Take ``reader``'s zero padding out into a ``Pad`` of ``value`` on its data input:
    a Pad that shares the scale of the tensor it pads (``root``), then ``reader`` with
    ``pads`` all 0."""
    pads = _conv_pads(reader)
    spatial = len(pads) // 2
    pad = QuantableOperation(
        Operation(f'{reader.name}/centring_pad', 'Pad', {'mode': 'constant'}, reader.opset,
                  reader.platform),
        OperationQuantizationConfig([root.sharing(), fp32_config(), fp32_config()],
                                    [root.sharing()]))
    source = reader.inputs[0]
    padded = graph.insert_op_before(pad, reader, 0)
    graph.create_variable(value=torch.tensor([0, 0] + pads[:spatial] + [0, 0] + pads[spatial:]),
                          is_parameter=True, dest_ops=[pad])
    graph.create_variable(value=torch.tensor(value, dtype=source.dtype or torch.float32),
                          is_parameter=True, dest_ops=[pad])
    padded.dtype = source.dtype
    if source.shape is not None and all(isinstance(dim, int) for dim in source.shape[2:]):
        padded.shape = tuple(source.shape[:2]) + tuple(
            dim + begin + end for dim, begin, end in
            zip(source.shape[2:], pads[:spatial], pads[spatial:]))
    reader.attributes['pads'] = [0] * len(pads)


def _bias_factor(op: Operation) -> float:
    """What multiplies ``op``'s bias in its output: a Gemm's ``beta`` (``alpha A B +
    beta C``), 1 for a Conv."""
    return float(op.attributes.get('beta', 1.0)) if op.type == 'Gemm' else 1.0


def _add(op: Operation, index: int, delta: torch.Tensor) -> None:
    """Add ``delta`` to parameter ``index`` of ``op``, in the FP32 reference too."""
    if isinstance(op, QuantableOperation):
        op.add_to_parameter(index, delta)
    else:
        op.inputs[index].value = op.inputs[index].value + delta.to(op.inputs[index].value)


def _absorb(reader: Operation, shift: float) -> None:
    """Give ``reader``'s bias ``shift`` times its weight sums: the FP32 weights' in the
    FP32 reference, the weights as they run (quantized by their config) in the quantized
    graph, so that each computes exactly what it did before its input moved."""
    bias = reader.inputs[2].value
    weight = reader.inputs[1].value  # rounded already where a pass (AdaRound) set it
    if not isinstance(reader, QuantableOperation):
        _add(reader, 2, (shift * _weight_sums(reader, weight)).reshape(bias.shape))
        return
    fp32 = shift * _weight_sums(reader, reader.fp32_parameter(1))
    _add(reader, 2, fp32.reshape(bias.shape))
    config = reader.input_quant_config[1]
    if config.state.is_activated and config.scale is not None:
        weight = fake_quantize(weight, config)  # a baked weight holds its numbers already
    running = shift * _weight_sums(reader, weight)
    if not torch.equal(running, fp32):
        reader.set_parameter_value(2, reader.inputs[2].value + (running - fp32).reshape(
            bias.shape).to(bias))


def _weight_sums(op: Operation, weight: torch.Tensor) -> torch.Tensor:
    """Per output channel, the sum of ``weight`` (``op``'s) over everything one output
    reads, times what multiplies it (a Gemm's ``alpha / beta``: its bias is ``beta C``)."""
    weight = weight.double()
    if op.type == 'Gemm':
        alpha = float(op.attributes.get('alpha', 1.0))
        sums = weight.sum(1 if op.attributes.get('transB', 0) else 0)
        return sums * alpha / _bias_factor(op)
    return weight.reshape(weight.shape[0], -1).sum(1)


@PTQ_PASSES.register_module(name=['ActivationCentering', 'activation_centering'])
class ActivationCentering(PTQPass):
    """Shift each centerable ReLU6 output to the middle of its range (module docstring).

    Runs after calibration (``stage = 'calibrated'``): the shift is half the calibrated
    range, and the tensor's scale halves with it.  List it first among the calibrated
    passes: AdaRound and bias correction then work on the centred graph (the rewrite is
    the FP32 reference's too, so they compare like with like).  Reads no data.

    Args:
        clips: the names of the Clip operations to centre (None: every one of
            :func:`centerable_clips` whose quantizer is symmetric and per tensor).
        explicit_pads: also centre tensors read by zero-padded convolutions, moving their
            padding into a ``Pad`` of the shifted zero (module docstring); off by default,
            as the engine then pads in a step of its own.

    Example:
        >>> import torch
        >>> from razorlib.quantization import QuantExecutor, quantize_torch_model, snr_db
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), torch.nn.ReLU6(),
        ...                           torch.nn.Conv2d(8, 4, 1)).eval()
        >>> with torch.no_grad():
        ...     _ = net[0].weight.mul_(4)  # the ReLU6 output spans [0, 6]
        >>> batches = [torch.randn(16, 3, 6, 6) for _ in range(4)]
        >>> graph = quantize_torch_model(net, batches, batches[0], 'TRT_INT8',
        ...                              progress=False)
        >>> def snr():
        ...     with torch.no_grad():
        ...         return snr_db(net(batches[0]), QuantExecutor(graph)(batches[0])[0])
        >>> before = snr()
        >>> ActivationCentering()(graph, batches).changes
        1
        >>> {name: round(shift, 3) for name, shift in  # half of the calibrated 6
        ...  graph.extension_attrib['activation_centering'].items()}
        {'n4': 3.0}
        >>> round(before, 1), round(snr(), 1)  # the input and output roundings stay
        (35.0, 35.7)
    """

    def __init__(self, clips: Optional[List[str]] = None, explicit_pads: bool = False) -> None:
        self.clips = name_list(clips, 'ActivationCentering: clips', 'Clip')
        self.explicit_pads = bool(explicit_pads)

    def call(self, graph: BaseGraph, batches: list, device) -> PassResult:
        """Centre every eligible Clip output; ``changes`` counts them, and
        ``graph.extension_attrib['activation_centering']`` maps each Clip's name to its
        shift ``c``."""
        found = centerable_clips(graph, self.explicit_pads)
        if self.clips is not None:
            known = {clip.name for _, clip, _ in found}
            missing = sorted(set(self.clips) - known)
            if missing:
                raise KeyError(f'ActivationCentering: graph {graph.name!r} has no centerable '
                               f'Clip {missing}; it has {sorted(known)}')
            found = [entry for entry in found if entry[1].name in self.clips]
        shifts = {}
        for producer, clip, readers in found:
            shift = self._centre(graph, producer, clip, readers)
            if shift is not None:
                shifts[clip.name] = shift
        graph.extension_attrib.setdefault('activation_centering', {}).update(shifts)
        follow_passive_scales(graph)  # the readers' biases: input scale x weight scale
        logger.info('ActivationCentering: %d of %d centerable ReLU6 outputs of graph %r '
                    'centred', len(shifts), len(found), graph.name)
        if len(shifts) < len(found):
            logger.info('ActivationCentering: left %s: not quantized by a calibrated, '
                        'symmetric, signed, per-tensor quantizer (an asymmetric one, as '
                        "ORT_INT8's uint8, already spends every code on the range)",
                        sorted(clip.name for _, clip, _ in found if clip.name not in shifts))
        return PassResult.counted(graph, len(shifts))

    @staticmethod
    def _centre(graph: BaseGraph, producer: Operation, clip: Operation,
                readers: List[Operation]) -> Optional[float]:
        """Shift one Clip output by half its calibrated range; its shift, or None where its
        quantizer is not a symmetric, signed, per-tensor one."""
        if not isinstance(clip, QuantableOperation):
            return None
        root = clip.output_quant_config[0].dominated_by
        if (not root.state.is_activated or root.state.is_passive or root.scale is None
                or root.scale.numel() != 1 or root.quant_min >= 0
                or (root.offset is not None and bool((root.offset != 0).any()))):
            return None
        half = root.scale / 2
        shift = float(half) * root.quant_max  # -shift lands on code -quant_max exactly
        _add(producer, 2, torch.tensor(-shift / _bias_factor(producer)))  # output - shift
        _add(clip, 1, torch.tensor(-shift))
        _add(clip, 2, torch.tensor(-shift))
        for reader in readers:
            if any(_conv_pads(reader)):
                _move_padding(graph, reader, -shift, root)
            _absorb(reader, shift)
        root.scale = half
        return shift
