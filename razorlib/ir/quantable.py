"""QuantableOperation: an operation with a quantization config for each of its tensors.

Baking replaces a parameter's value by its quantized numbers, after keeping the fp32 value
aside.  ``dequantize`` and ``restore_quantize_state`` swap the two: the value not in use is
parked on ``expire_device``, the one in use lives on the device the parameter was on.
Swapping moves tensors without arithmetic, so round trips are bit-exact.
"""
from typing import Callable, Dict, List, Optional, Tuple

import torch

from .operation import Operation
from .quant_config import (OperationQuantizationConfig, QuantizationStates,
                           TensorQuantizationConfig)
from .variable import Variable

__all__ = ['QuantFunction', 'QuantableOperation']

QuantFunction = Callable[[torch.Tensor, TensorQuantizationConfig], torch.Tensor]
"""``quant_func(value, config) -> quantized value``, the function baking applies."""

_BAKED_STATE = {
    QuantizationStates.ACTIVATED: QuantizationStates.BAKED,
    QuantizationStates.PASSIVE: QuantizationStates.PASSIVE_BAKED,
}


class QuantableOperation(Operation):
    """An operation whose inputs and outputs each have a :class:`TensorQuantizationConfig`.

    Built from an operation, it takes over the operation's name, type, attributes, opset,
    platform, annotations and (the same) input and output variables; swap it into the graph
    with :meth:`~razorlib.ir.graph.BaseGraph.replace_operation`.

    Args:
        op: the operation to make quantable.
        config: one config per input and per output of ``op``.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph, QuantizationStates, TensorQuantizationConfig
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> w = graph.create_variable('w', torch.tensor([0.26]), is_parameter=True)
        >>> mul = graph.create_operation('Mul', inputs=[x, w], outputs=[graph.create_variable()])
        >>> configs = [TensorQuantizationConfig(state=QuantizationStates.ACTIVATED)
        ...            for _ in range(3)]
        >>> qmul = QuantableOperation(mul, OperationQuantizationConfig(configs[:2], configs[2:]))
        >>> graph.replace_operation(mul, qmul)
        >>> qmul.baking_parameters(lambda value, config: value.mul(10).round().div(10))
        >>> w.value, qmul.input_quant_config[1].state.name
        (tensor([0.3000]), 'BAKED')
        >>> qmul.dequantize(); w.value
        tensor([0.2600])
    """

    def __init__(self, op: Operation, config: OperationQuantizationConfig) -> None:
        super().__init__(op.name, op.type, op.attributes, op.opset, op.platform,
                         op.extension_attrib)
        self.inputs = list(op.inputs)
        self.outputs = list(op.outputs)
        self.config = config
        self._parked_values: Dict[int, torch.Tensor] = {}
        self._dequantized = False

    @property
    def input_quant_config(self) -> List[TensorQuantizationConfig]:
        """The configs of the inputs, in input order."""
        return self.config.input_quantization_config

    @property
    def output_quant_config(self) -> List[TensorQuantizationConfig]:
        """The configs of the outputs, in output order."""
        return self.config.output_quantization_config

    @property
    def is_dequantized(self) -> bool:
        """Whether :meth:`dequantize` is in force."""
        return self._dequantized

    @property
    def config_with_variable(self) -> List[Tuple[TensorQuantizationConfig, Variable]]:
        """``(config, variable)`` pairs for the inputs, then the outputs.

        Raises:
            ValueError: the number of configs differs from the number of inputs or outputs.
        """
        for side, configs, variables in (('input', self.input_quant_config, self.inputs),
                                         ('output', self.output_quant_config, self.outputs)):
            if len(configs) != len(variables):
                raise ValueError(f'operation {self.name!r} has {len(variables)} {side}s but '
                                 f'{len(configs)} {side} quantization configs; give it one '
                                 f'config per {side}')
        return list(zip(self.input_quant_config, self.inputs)) + list(
            zip(self.output_quant_config, self.outputs))

    def _parameter_configs(self) -> List[Tuple[int, TensorQuantizationConfig, Variable]]:
        pairs = self.config_with_variable[:self.num_of_input]
        return [(i, config, var) for i, (config, var) in enumerate(pairs) if var.is_parameter]

    def store_parameter_value(self) -> None:
        """Keep a copy of every parameter value aside, on the CPU, for :meth:`dequantize`.

        Raises:
            RuntimeError: the operation is dequantized (its values are fp32 already).
        """
        self._require_quantized('store parameter values')
        for index, _, var in self._parameter_configs():
            if var.value is not None:
                self._parked_values[index] = var.value.detach().to('cpu', copy=True)

    def adopt_parameter_values(self) -> None:
        """Make the parameter values in use the fp32 ones: drop the copies kept aside
        (by :meth:`set_parameter_value`, :meth:`store_parameter_value` or baking), so
        :meth:`fp32_parameter` and :meth:`dequantize` give the values in use.  What QAT
        does when it takes a graph over: it trains the values in use, and the copies kept
        aside would be a second copy of the weights that nothing reads.  (Executed in
        :meth:`fp32_parameter`'s example.)
        """
        self._parked_values.clear()

    def set_parameter_value(self, index: int, value: torch.Tensor) -> None:
        """Give parameter input ``index`` a new value in the quantized graph only.

        Its fp32 value is kept aside first (once), so :meth:`dequantize` brings the
        original back; the config's state is left as it is.  What post-training passes
        use to correct a bias or choose a weight's rounding without changing the FP32
        reference.

        Args:
            index: the input index of a parameter.
            value: its new value, shaped like the old one.

        Raises:
            RuntimeError: the operation is dequantized.
            ValueError: input ``index`` is no parameter, or the shapes differ.

        Example:
            >>> import torch
            >>> from razorlib.ir import BaseGraph, TensorQuantizationConfig
            >>> graph = BaseGraph()
            >>> x = graph.create_variable('x')
            >>> b = graph.create_variable('b', torch.tensor([1.0]), is_parameter=True)
            >>> add = graph.create_operation('Add', inputs=[x, b],
            ...                              outputs=[graph.create_variable()])
            >>> configs = [TensorQuantizationConfig() for _ in range(3)]
            >>> qadd = QuantableOperation(add, OperationQuantizationConfig(configs[:2],
            ...                                                            configs[2:]))
            >>> qadd.set_parameter_value(1, torch.tensor([1.5]))
            >>> qadd.dequantize(); b.value
            tensor([1.])
        """
        var = self._parameter(index, 'set a parameter value')
        if tuple(value.shape) != tuple(var.value.shape):
            raise ValueError(f'operation {self.name!r}: parameter {var.name!r} has shape '
                             f'{tuple(var.value.shape)}, the new value {tuple(value.shape)}')
        if index not in self._parked_values:
            self._parked_values[index] = var.value.detach().to('cpu', copy=True)
        var.value = value.to(var.value)

    def fp32_parameter(self, index: int) -> torch.Tensor:
        """The fp32 value of parameter input ``index``: the one kept aside (by
        :meth:`set_parameter_value` or baking) if any, else the one in use.

        Example:
            >>> from razorlib.ir import BaseGraph, TensorQuantizationConfig
            >>> graph = BaseGraph()
            >>> b = graph.create_variable('b', torch.tensor([1.0]), is_parameter=True)
            >>> add = graph.create_operation('Add', inputs=[graph.create_variable('x'), b],
            ...                              outputs=[graph.create_variable()])
            >>> qadd = QuantableOperation(add, OperationQuantizationConfig(
            ...     [TensorQuantizationConfig() for _ in range(2)], [TensorQuantizationConfig()]))
            >>> qadd.set_parameter_value(1, torch.tensor([1.5]))
            >>> qadd.fp32_parameter(1), b.value
            (tensor([1.]), tensor([1.5000]))
            >>> qadd.adopt_parameter_values(); qadd.fp32_parameter(1)  # the value in use
            tensor([1.5000])
        """
        if self._dequantized or index not in self._parked_values:
            return self.inputs[index].value
        return self._parked_values[index].to(self.inputs[index].value.device)

    def add_to_parameter(self, index: int, delta: torch.Tensor) -> None:
        """Add ``delta`` to parameter input ``index`` in the quantized graph and in the fp32
        value kept aside.

        :meth:`set_parameter_value` changes the quantized graph alone, so the dequantized
        graph (the FP32 reference) computes what it did; a rewrite that changes what the
        graph computes at one tensor and undoes it at the next (a shift of an activation
        that its readers' biases absorb) changes both, or the reference and the quantized
        graph would disagree at that tensor.

        Args:
            index: the input index of a parameter whose value is not baked.
            delta: broadcastable to the parameter's value.

        Raises:
            RuntimeError: the operation is dequantized, or the parameter is baked.
            ValueError: input ``index`` is no parameter with a value.

        Example:
            >>> from razorlib.ir import BaseGraph, TensorQuantizationConfig
            >>> graph = BaseGraph()
            >>> x = graph.create_variable('x')
            >>> b = graph.create_variable('b', torch.tensor([1.0]), is_parameter=True)
            >>> add = graph.create_operation('Add', inputs=[x, b],
            ...                              outputs=[graph.create_variable()])
            >>> qadd = QuantableOperation(add, OperationQuantizationConfig(
            ...     [TensorQuantizationConfig() for _ in range(2)], [TensorQuantizationConfig()]))
            >>> qadd.set_parameter_value(1, torch.tensor([1.5]))  # the quantized graph's
            >>> qadd.add_to_parameter(1, torch.tensor(-0.5))
            >>> qadd.dequantize()
            >>> b.value  # the fp32 value moved too
            tensor([0.5000])
        """
        var = self._parameter(index, 'add to a parameter')
        if self.input_quant_config[index].state.is_baked:
            raise RuntimeError(f'operation {self.name!r}: parameter {var.name!r} is baked '
                               '(its value holds quantized numbers); add to it before baking')
        var.value = var.value + delta.to(var.value)
        if index in self._parked_values:
            parked = self._parked_values[index]
            self._parked_values[index] = parked + delta.to(parked)

    def baking_parameters(self, quant_func: QuantFunction) -> None:
        """Quantize the activated parameters in place, once, keeping their fp32 values aside.

        Each parameter input whose config is ACTIVATED (PASSIVE) gets
        ``quant_func(value, config)`` as its value and the state BAKED (PASSIVE_BAKED).

        Args:
            quant_func: maps an fp32 value and its config to the quantized value.

        Raises:
            RuntimeError: the operation is dequantized.
        """
        self._require_quantized('bake parameters')
        for index, config, var in self._parameter_configs():
            if config.state in _BAKED_STATE and var.value is not None:
                if index not in self._parked_values:
                    self._parked_values[index] = var.value.detach().to('cpu', copy=True)
                var.value = quant_func(var.value, config)
                config.state = _BAKED_STATE[config.state]

    def dequantize(self, parameter_only: bool = False, expire_device: str = 'cpu') -> None:
        """Put the fp32 parameter values back and switch the configs to FP32.

        The quantized values are parked on ``expire_device``; each config remembers its
        state for :meth:`restore_quantize_state`.  A dequantized operation stays as it is.

        Args:
            parameter_only: switch only the parameters' configs; activations stay quantized.
            expire_device: where to park the quantized values.
        """
        if self._dequantized:
            return
        self._swap_parked_values(expire_device)
        for config, var in self.config_with_variable:
            if var.is_parameter or not parameter_only:
                config.dequantize()
        self._dequantized = True

    def restore_quantize_state(self, expire_device: str = 'cpu') -> None:
        """Undo :meth:`dequantize`: quantized values and states come back.

        Args:
            expire_device: where to park the fp32 values.
        """
        if not self._dequantized:
            return
        self._swap_parked_values(expire_device)
        for config, _ in self.config_with_variable:
            config.restore_quantize_state()
        self._dequantized = False

    def _swap_parked_values(self, expire_device: str) -> None:
        for index, parked in self._parked_values.items():
            var = self.inputs[index]
            in_use = var.value
            var.value = parked.to(in_use.device)
            self._parked_values[index] = in_use.to(expire_device)

    def _parameter(self, index: int, action: str):
        """Input ``index``, a parameter with a value, of this quantized operation, before
        ``action``; RuntimeError if dequantized, ValueError if no such parameter."""
        self._require_quantized(action)
        var = self.inputs[index]
        if not var.is_parameter or var.value is None:
            raise ValueError(f'operation {self.name!r}: input {index} ({var.name!r}) is no '
                             'parameter with a value')
        return var

    def _require_quantized(self, action: str) -> None:
        if self._dequantized:
            raise RuntimeError(f'operation {self.name!r} is dequantized: call '
                               f'restore_quantize_state() before you {action}')

    def copy(self, config: Optional[OperationQuantizationConfig] = None,
             copy_value: bool = False) -> 'QuantableOperation':
        """An unlinked copy with its own configs and the values it keeps aside.

        Args:
            config: the copy's configs; a deep copy of this operation's by default.
            copy_value: clone the values kept aside; by default the copy shares them.

        Returns:
            The new operation.
        """
        if config is None:
            config = self.config.copy()
        clone = QuantableOperation(super().copy(), config)
        clone._parked_values = {index: value.clone() if copy_value else value
                                for index, value in self._parked_values.items()}
        clone._dequantized = self._dequantized
        return clone
