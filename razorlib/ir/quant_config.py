"""Quantization configs: how one tensor (and one operation's tensors) is to be quantized.

A :class:`TensorQuantizationConfig` holds a policy, a rounding mode, an integer range and,
once calibrated, a scale and an offset.  Configs that must agree (the inputs of a Concat,
an activation read by several consumers) are joined with ``dominated_by``: a union-find
whose root holds the shared scale, offset and state.  ``master_by`` is a plain link to the
config a derived scale is computed from (a bias from its layer's input and weight); the
quantizer does that computation.  Copies are always deep: a copied set of configs keeps its
links among its own clones and never points back at the originals.
"""
import enum
from typing import Dict, List, Optional, Sequence

import torch

__all__ = [
    'DEFAULT_POLICY', 'OperationQuantizationConfig', 'QuantizationProperty', 'QuantizationStates',
    'RoundingPolicy', 'TensorQuantizationConfig', 'copy_configs', 'copy_operation_configs'
]


class QuantizationStates(enum.Enum):
    """Where a tensor stands in the quantization pipeline.

    Example:
        >>> QuantizationStates.PASSIVE.is_activated, QuantizationStates.BAKED.is_baked
        (True, True)
    """
    INITIAL = 'initial'
    """Configured, not calibrated yet: no scale or offset."""
    ACTIVATED = 'activated'
    """Calibrated: the executor quantizes the tensor with this config."""
    BAKED = 'baked'
    """A parameter whose value already holds its quantized numbers."""
    OVERLAPPED = 'overlapped'
    """Quantized by another config of the same variable (the producer's output config)."""
    PASSIVE = 'passive'
    """Scale derived from other configs (``master_by``, e.g. a bias); quantized at run time."""
    PASSIVE_BAKED = 'passive_baked'
    """A passive parameter whose value already holds its quantized numbers."""
    FP32 = 'fp32'
    """Not quantized: the tensor stays in floating point."""

    @property
    def is_activated(self) -> bool:
        """Whether the executor quantizes the tensor at run time."""
        return self in (QuantizationStates.ACTIVATED, QuantizationStates.PASSIVE)

    @property
    def is_baked(self) -> bool:
        """Whether the tensor's value already holds its quantized numbers."""
        return self in (QuantizationStates.BAKED, QuantizationStates.PASSIVE_BAKED)

    @property
    def is_passive(self) -> bool:
        """Whether the scale is derived from other configs."""
        return self in (QuantizationStates.PASSIVE, QuantizationStates.PASSIVE_BAKED)

    @property
    def is_quantized(self) -> bool:
        """Whether the tensor ends up quantized, at run time or baked."""
        return self.is_activated or self.is_baked


class QuantizationProperty(enum.Flag):
    """Flags that make up a quantization policy: one granularity, one kind, one symmetry.

    Example:
        >>> policy = QuantizationProperty.PER_CHANNEL | QuantizationProperty.LINEAR | \\
        ...     QuantizationProperty.SYMMETRICAL
        >>> QuantizationProperty.PER_CHANNEL in policy
        True
    """
    PER_TENSOR = enum.auto()
    PER_CHANNEL = enum.auto()
    LINEAR = enum.auto()
    FLOATING = enum.auto()
    SYMMETRICAL = enum.auto()
    ASYMMETRICAL = enum.auto()
    POWER_OF_2 = enum.auto()


_EXCLUSIVE_CHOICES = (
    (QuantizationProperty.PER_TENSOR, QuantizationProperty.PER_CHANNEL),
    (QuantizationProperty.LINEAR, QuantizationProperty.FLOATING),
    (QuantizationProperty.SYMMETRICAL, QuantizationProperty.ASYMMETRICAL),
)


class RoundingPolicy(enum.Enum):
    """How a quantizer rounds a scaled value to an integer.

    Example:
        >>> RoundingPolicy('round_half_even')
        <RoundingPolicy.ROUND_HALF_EVEN: 'round_half_even'>
    """
    ROUND_HALF_EVEN = 'round_half_even'
    ROUND_HALF_AWAY_FROM_ZERO = 'round_half_away_from_zero'
    ROUND_HALF_TOWARDS_ZERO = 'round_half_towards_zero'
    ROUND_HALF_UP = 'round_half_up'
    ROUND_HALF_DOWN = 'round_half_down'
    ROUND_UP = 'round_up'
    ROUND_DOWN = 'round_down'


DEFAULT_POLICY = (QuantizationProperty.PER_TENSOR | QuantizationProperty.LINEAR
                  | QuantizationProperty.SYMMETRICAL)
"""Per-tensor, linear, symmetrical: the policy of a config built without one."""


def _check_policy(policy: QuantizationProperty, channel_axis: Optional[int]) -> None:
    for first, second in _EXCLUSIVE_CHOICES:
        if (first in policy) == (second in policy):
            raise ValueError(f'quantization policy {policy} must hold exactly one of '
                             f'{first.name} and {second.name}')
    if QuantizationProperty.PER_CHANNEL in policy and channel_axis is None:
        raise ValueError('a PER_CHANNEL quantization policy needs a channel_axis')


def _as_tensor(value) -> Optional[torch.Tensor]:
    return value if value is None or isinstance(value, torch.Tensor) else torch.as_tensor(value)


class TensorQuantizationConfig:
    """How one tensor is quantized; scale, offset and state are shared along ``dominated_by``.

    Args:
        policy: the :class:`QuantizationProperty` flags: exactly one of PER_TENSOR and
            PER_CHANNEL, of LINEAR and FLOATING, of SYMMETRICAL and ASYMMETRICAL.
        rounding: the :class:`RoundingPolicy`.
        num_of_bits: the bit width of the quantized integers.
        quant_min: the smallest quantized integer.
        quant_max: the largest quantized integer.
        scale: the scale (a tensor, one entry per channel when per-channel), or None.
        offset: the zero point, like ``scale``.
        channel_axis: the channel axis of a per-channel policy.
        observer_algorithm: the name of the observer that calibrates this config.
        state: the :class:`QuantizationStates` of the tensor.

    Example:
        >>> concat_in = TensorQuantizationConfig()
        >>> concat_out = TensorQuantizationConfig(scale=0.5, state=QuantizationStates.ACTIVATED)
        >>> concat_in.dominated_by = concat_out
        >>> concat_in.scale, concat_in.state
        (tensor(0.5000), <QuantizationStates.ACTIVATED: 'activated'>)
    """

    def __init__(self, policy: QuantizationProperty = DEFAULT_POLICY,
                 rounding: RoundingPolicy = RoundingPolicy.ROUND_HALF_EVEN,
                 num_of_bits: int = 8, quant_min: int = -128, quant_max: int = 127,
                 scale: Optional[torch.Tensor] = None, offset: Optional[torch.Tensor] = None,
                 channel_axis: Optional[int] = None, observer_algorithm: str = 'minmax',
                 state: QuantizationStates = QuantizationStates.INITIAL) -> None:
        _check_policy(policy, channel_axis)
        if num_of_bits < 1 or quant_min >= quant_max:
            raise ValueError(f'invalid integer range: {num_of_bits} bits, '
                             f'[{quant_min}, {quant_max}]')
        self.policy = policy
        self.rounding = RoundingPolicy(rounding)
        self.num_of_bits = num_of_bits
        self.quant_min = quant_min
        self.quant_max = quant_max
        self.channel_axis = channel_axis
        self.observer_algorithm = observer_algorithm
        self._parent = self
        self._master: Optional[TensorQuantizationConfig] = None
        self._scale = _as_tensor(scale)
        self._offset = _as_tensor(offset)
        self._state = QuantizationStates(state)
        self._state_before_dequantize: Optional[QuantizationStates] = None

    def _root(self) -> 'TensorQuantizationConfig':
        root = self
        while root._parent is not root:
            root = root._parent
        node = self
        while node._parent is not root:
            node._parent, node = root, node._parent
        return root

    @property
    def dominated_by(self) -> 'TensorQuantizationConfig':
        """The config whose scale, offset and state this one shares: its set's root.

        A config nobody dominates is its own root.  Assigning ``a.dominated_by = b`` joins
        a's whole set to b's; b's root keeps the shared values.
        """
        return self._root()

    @dominated_by.setter
    def dominated_by(self, dominator: 'TensorQuantizationConfig') -> None:
        if not isinstance(dominator, TensorQuantizationConfig):
            raise TypeError(f'dominated_by takes a TensorQuantizationConfig, got {dominator!r}')
        root, new_root = self._root(), dominator._root()
        if root is not new_root:
            root._parent = new_root
            self._parent = new_root

    @property
    def master_by(self) -> Optional['TensorQuantizationConfig']:
        """The config a derived (passive) scale is computed from, or None."""
        return self._master

    @master_by.setter
    def master_by(self, master: Optional['TensorQuantizationConfig']) -> None:
        if master is self:
            raise ValueError('a quantization config cannot be its own master')
        if master is not None and not isinstance(master, TensorQuantizationConfig):
            raise TypeError(f'master_by takes a TensorQuantizationConfig, got {master!r}')
        self._master = master

    @property
    def scale(self) -> Optional[torch.Tensor]:
        """The scale, read from and written to the dominating config."""
        return self._root()._scale

    @scale.setter
    def scale(self, scale: Optional[torch.Tensor]) -> None:
        self._root()._scale = _as_tensor(scale)

    @property
    def offset(self) -> Optional[torch.Tensor]:
        """The zero point, read from and written to the dominating config."""
        return self._root()._offset

    @offset.setter
    def offset(self, offset: Optional[torch.Tensor]) -> None:
        self._root()._offset = _as_tensor(offset)

    @property
    def state(self) -> QuantizationStates:
        """The state, read from and written to the dominating config."""
        return self._root()._state

    @state.setter
    def state(self, state: QuantizationStates) -> None:
        root = self._root()
        root._state = QuantizationStates(state)
        root._state_before_dequantize = None

    @property
    def is_dequantized(self) -> bool:
        """Whether :meth:`dequantize` switched the config to FP32 and it is not restored."""
        return self._root()._state_before_dequantize is not None

    def dequantize(self) -> None:
        """Switch to FP32, remembering the state; no-op if FP32 already or dequantized."""
        root = self._root()
        if root._state is not QuantizationStates.FP32:
            root._state, root._state_before_dequantize = QuantizationStates.FP32, root._state

    def restore_quantize_state(self) -> None:
        """Go back to the state :meth:`dequantize` remembered; no-op if not dequantized."""
        root = self._root()
        if root._state_before_dequantize is not None:
            root._state, root._state_before_dequantize = root._state_before_dequantize, None

    def copy(self) -> 'TensorQuantizationConfig':
        """A deep copy; its dominator and master are cloned too (see :func:`copy_configs`)."""
        return copy_configs([self])[0]

    def _copy_unlinked(self) -> 'TensorQuantizationConfig':
        clone = self._same_format(_clone(self._scale), _clone(self._offset), self._state)
        clone._state_before_dequantize = self._state_before_dequantize
        return clone

    def sharing(self) -> 'TensorQuantizationConfig':
        """A new config of this one's format, joined to its set: it quantizes with the
        set's scale, offset and state (a tensor a pass adds, such as a Pad of a quantized
        tensor).

        Example:
            >>> root = TensorQuantizationConfig(scale=0.5, state=QuantizationStates.ACTIVATED)
            >>> padded = root.sharing()
            >>> padded.dominated_by is root, padded.scale
            (True, tensor(0.5000))
        """
        config = self._same_format()
        config.dominated_by = self
        return config

    def _same_format(self, scale: Optional[torch.Tensor] = None,
                     offset: Optional[torch.Tensor] = None,
                     state: QuantizationStates = QuantizationStates.INITIAL
                     ) -> 'TensorQuantizationConfig':
        return TensorQuantizationConfig(
            self.policy, self.rounding, self.num_of_bits, self.quant_min, self.quant_max,
            scale, offset, self.channel_axis, self.observer_algorithm, state)

    def __repr__(self) -> str:
        links = ''.join([' dominated' if self._root() is not self else '',
                         ' mastered' if self._master is not None else ''])
        return (f'TensorQuantizationConfig({self.state.name}, {self.policy}, '
                f'{self.num_of_bits} bits [{self.quant_min}, {self.quant_max}], '
                f'scale={self.scale}, offset={self.offset}{links})')


def _clone(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if tensor is None else tensor.detach().clone()


def copy_configs(
        configs: Sequence[TensorQuantizationConfig]) -> List[TensorQuantizationConfig]:
    """Deep-copy configs together, keeping their ``dominated_by``/``master_by`` links.

    A link from a copied config to a config outside ``configs`` is followed and its target
    is cloned too, so no clone ever points at an original.  A config listed twice is
    cloned once.

    Args:
        configs: the configs to copy.

    Returns:
        The clones, in the order of ``configs``.
    """
    clones: Dict[TensorQuantizationConfig, TensorQuantizationConfig] = {}
    pending = list(configs)
    while pending:
        config = pending.pop()
        if config in clones:
            continue
        clones[config] = config._copy_unlinked()
        pending.append(config._parent)
        if config._master is not None:
            pending.append(config._master)
    for original, clone in clones.items():
        clone._parent = clones[original._parent]
        clone._master = clones.get(original._master)
    return [clones[config] for config in configs]


class OperationQuantizationConfig:
    """The quantization configs of one operation: one per input and one per output.

    Args:
        input_quantization_config: one config per input, in input order.
        output_quantization_config: one config per output, in output order.

    Example:
        >>> weight, bias = TensorQuantizationConfig(), TensorQuantizationConfig()
        >>> bias.master_by = weight
        >>> config = OperationQuantizationConfig([TensorQuantizationConfig(), weight, bias],
        ...                                      [TensorQuantizationConfig()])
        >>> clone = config.copy()
        >>> clone.input_quantization_config[2].master_by is clone.input_quantization_config[1]
        True
    """

    def __init__(self, input_quantization_config: Sequence[TensorQuantizationConfig] = (),
                 output_quantization_config: Sequence[TensorQuantizationConfig] = ()) -> None:
        self.input_quantization_config = list(input_quantization_config)
        self.output_quantization_config = list(output_quantization_config)

    def copy(self) -> 'OperationQuantizationConfig':
        """A deep copy whose links among its own configs point at their clones."""
        return copy_operation_configs([self])[0]

    def __repr__(self) -> str:
        return (f'OperationQuantizationConfig(inputs={self.input_quantization_config}, '
                f'outputs={self.output_quantization_config})')


def copy_operation_configs(
        op_configs: Sequence[OperationQuantizationConfig]) -> List[OperationQuantizationConfig]:
    """Deep-copy the configs of several operations at once, keeping links across them.

    Args:
        op_configs: the operation configs to copy, e.g. those of every operation of a graph.

    Returns:
        The clones, in the order of ``op_configs``; see :func:`copy_configs`.
    """
    flat = [config for op_config in op_configs
            for config in op_config.input_quantization_config
            + op_config.output_quantization_config]
    clones = iter(copy_configs(flat))
    return [OperationQuantizationConfig(
        [next(clones) for _ in op_config.input_quantization_config],
        [next(clones) for _ in op_config.output_quantization_config])
        for op_config in op_configs]
