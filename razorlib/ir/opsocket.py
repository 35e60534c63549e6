"""Op sockets: which inputs and outputs of an operation a quantizer may quantize, as a table.

Each input and output of an operation plays a :class:`TensorRole`: an activation, a weight,
a bias (quantized with a scale derived from other configs) or a value that is never
quantized (a shape, axes, indices, bounds, statistics).  :data:`SOCKET_RULES` maps an ONNX op
type to the :class:`SocketRule` that lays those roles out; :func:`socket_for` turns a rule
into the :class:`OpSocket` of one operation, given how many inputs and outputs it has.
An op type missing from the table treats every input and output as an activation.
"""
import enum
from dataclasses import dataclass
from typing import Dict, Tuple

__all__ = ['OpSocket', 'SOCKET_RULES', 'SocketRule', 'TensorRole', 'socket_for']


class TensorRole(enum.Enum):
    """What a quantizer does with one input or output of an operation.

    Example:
        >>> TensorRole.WEIGHT.is_quantized, TensorRole.NOT_QUANTIZED.is_quantized
        (True, False)
    """
    ACTIVATION = 'activation'
    WEIGHT = 'weight'
    BIAS = 'bias'
    NOT_QUANTIZED = 'not_quantized'

    @property
    def is_quantized(self) -> bool:
        """Whether a tensor playing this role gets a quantization config of its own."""
        return self is not TensorRole.NOT_QUANTIZED


@dataclass(frozen=True)
class OpSocket:
    """The roles of one operation's inputs and outputs, and how data flows through it.

    Args:
        inputs: the role of each input, in input order.
        outputs: the role of each output, in output order.

    Example:
        >>> socket = socket_for('Conv', num_inputs=3, num_outputs=1)
        >>> socket.quantized_inputs, socket.flows
        ((0, 1, 2), ((0, 0),))
    """
    inputs: Tuple[TensorRole, ...]
    outputs: Tuple[TensorRole, ...]

    @property
    def quantized_inputs(self) -> Tuple[int, ...]:
        """Indices of the inputs that get a quantization config (weights and biases too)."""
        return tuple(i for i, role in enumerate(self.inputs) if role.is_quantized)

    @property
    def quantized_outputs(self) -> Tuple[int, ...]:
        """Indices of the outputs that get a quantization config."""
        return tuple(i for i, role in enumerate(self.outputs) if role.is_quantized)

    @property
    def flows(self) -> Tuple[Tuple[int, int], ...]:
        """``(input index, output index)`` pairs along which activation data flows.

        Every activation input flows to every activation output: weights, biases and
        control values shape the result but are not the data that passes through.
        """
        return tuple((i, o) for i, in_role in enumerate(self.inputs)
                     if in_role is TensorRole.ACTIVATION
                     for o, out_role in enumerate(self.outputs)
                     if out_role is TensorRole.ACTIVATION)


@dataclass(frozen=True)
class SocketRule:
    """How an op type lays out roles: leading inputs/outputs, then a role for the rest.

    Args:
        inputs: roles of the first inputs, in order.
        more_inputs: role of every input past ``inputs`` (variadic ops, optional inputs).
        outputs: roles of the first outputs, in order.
        more_outputs: role of every output past ``outputs``.

    Example:
        >>> rule = SocketRule(inputs=(TensorRole.ACTIVATION, ),
        ...                   more_inputs=TensorRole.NOT_QUANTIZED)
        >>> rule.build(num_inputs=2, num_outputs=1).inputs
        (<TensorRole.ACTIVATION: 'activation'>, <TensorRole.NOT_QUANTIZED: 'not_quantized'>)
    """
    inputs: Tuple[TensorRole, ...] = ()
    more_inputs: TensorRole = TensorRole.ACTIVATION
    outputs: Tuple[TensorRole, ...] = ()
    more_outputs: TensorRole = TensorRole.ACTIVATION

    def build(self, num_inputs: int, num_outputs: int) -> OpSocket:
        """The socket of an operation with ``num_inputs`` inputs and ``num_outputs`` outputs."""
        return OpSocket(inputs=_lay_out(self.inputs, self.more_inputs, num_inputs),
                        outputs=_lay_out(self.outputs, self.more_outputs, num_outputs))


def _lay_out(leading: Tuple[TensorRole, ...], rest: TensorRole,
             count: int) -> Tuple[TensorRole, ...]:
    return leading[:count] + (rest, ) * max(0, count - len(leading))


_ACT, _WEIGHT, _BIAS = TensorRole.ACTIVATION, TensorRole.WEIGHT, TensorRole.BIAS
_UNQUANTIZED = TensorRole.NOT_QUANTIZED

_ALL_ACTIVATIONS = SocketRule()
_WEIGHTED = SocketRule(inputs=(_ACT, _WEIGHT, _BIAS), more_inputs=_UNQUANTIZED)
_DATA_THEN_CONTROL = SocketRule(inputs=(_ACT, ), more_inputs=_UNQUANTIZED)
_DATA_THEN_INDICES_OUT = SocketRule(inputs=(_ACT, ), more_inputs=_UNQUANTIZED,
                                    outputs=(_ACT, ), more_outputs=_UNQUANTIZED)
_INDICES_OUT = SocketRule(inputs=(_ACT, ), more_inputs=_UNQUANTIZED,
                          more_outputs=_UNQUANTIZED)

SOCKET_RULES: Dict[str, SocketRule] = {
    # Input 0 is the data, 1 the weight, 2 the bias; normalizations keep their running
    # statistics (inputs 3 and 4) in floating point.
    **dict.fromkeys(('Conv', 'ConvTranspose', 'Gemm', 'MatMul', 'BatchNormalization',
                     'InstanceNormalization', 'LayerNormalization'), _WEIGHTED),
    'PRelu': SocketRule(inputs=(_ACT, _WEIGHT)),
    # Variadic ops whose every input is data.
    **dict.fromkeys(('Add', 'Sub', 'Mul', 'Div', 'Concat', 'Sum', 'Max', 'Min', 'Mean'),
                    _ALL_ACTIVATIONS),
    # Input 0 is a boolean condition that picks between the data inputs.
    'Where': SocketRule(inputs=(_UNQUANTIZED, )),
    # Input 0 is data; the other inputs are shapes, axes, indices, sizes or bounds.
    **dict.fromkeys(('Reshape', 'Resize', 'Slice', 'Expand', 'Tile', 'Squeeze', 'Unsqueeze',
                     'Gather', 'GatherElements', 'Pad', 'Split', 'Clip', 'ReduceMean',
                     'ReduceSum', 'ReduceMax', 'ReduceMin', 'Upsample', 'CumSum', 'GatherND',
                     'Compress', 'Trilu'),
                    _DATA_THEN_CONTROL),
    # Input 1 holds indices; inputs 0 and 2 are the data and the updates written into it.
    **dict.fromkeys(('ScatterND', 'ScatterElements'),
                    SocketRule(inputs=(_ACT, _UNQUANTIZED, _ACT))),
    # The only input is a shape; the output is data filled with one value.
    'ConstantOfShape': SocketRule(inputs=(_UNQUANTIZED, )),
    # Output 0 is data, the others are indices.
    **dict.fromkeys(('TopK', 'MaxPool'), _DATA_THEN_INDICES_OUT),
    # Outputs are shapes or indices, never quantized.
    **dict.fromkeys(('Shape', 'Size', 'ArgMax', 'ArgMin', 'NonZero'), _INDICES_OUT),
    # Start, limit and delta are index scalars; the output is an index sequence.
    'Range': SocketRule(more_inputs=_UNQUANTIZED, more_outputs=_UNQUANTIZED),
}


def socket_for(op_type: str, num_inputs: int, num_outputs: int) -> OpSocket:
    """The socket of an operation of type ``op_type`` with the given numbers of tensors.

    Args:
        op_type: the ONNX op type; one missing from :data:`SOCKET_RULES` is all activations.
        num_inputs: how many inputs the operation has.
        num_outputs: how many outputs the operation has.

    Returns:
        The operation's :class:`OpSocket`.
    """
    return SOCKET_RULES.get(op_type, _ALL_ACTIVATIONS).build(num_inputs, num_outputs)
