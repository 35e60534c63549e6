"""BaseQuantizer: turns dispatched operations into QuantableOperations with their configs.

A quantizer is a set of class-level rules for one platform: the :class:`TensorFormat` of
activations, weights and biases, the activations it fuses into compute ops, and the op
types whose tensors must share one scale.  :meth:`BaseQuantizer.quantize_operation` builds
one config per tensor, following the role each tensor plays in the op's socket;
:meth:`BaseQuantizer.link_configs` then runs the link passes of
:mod:`~razorlib.quantization.quantizers.links` over the whole graph, through a
:class:`~razorlib.ir.PassManager`.
"""
import logging
from typing import Callable, ClassVar, Dict, FrozenSet, Mapping, Optional, Type, TypeVar

from ...ir import (EMPTY_NAME, BaseGraph, Operation, OperationQuantizationConfig, PassManager,
                   PassResult, QuantableOperation, TensorQuantizationConfig, TensorRole, Variable)
from ...ir.components import registered
from ...registry import QUANTIZERS
from ..platform import TargetPlatform, as_platform
from .formats import (GROUPED_CONV_TRANSPOSE_PER_TENSOR, WEIGHT_CHANNEL_AXIS, ScaleSharing,
                      TensorFormat, fp32_config, last_axis, weight_channel_axis)
from .links import LINK_PASSES

logger = logging.getLogger(__name__)

__all__ = ['BaseQuantizer', 'QUANTIZERS', 'quantizer_class', 'register_quantizer']

_QuantizerClass = TypeVar('_QuantizerClass', bound=type)


def register_quantizer(cls: _QuantizerClass) -> _QuantizerClass:
    """Class decorator: register a quantizer in :data:`~razorlib.registry.QUANTIZERS` under
    its class name and the name of its platform (``'TRT_INT8'``)."""
    QUANTIZERS.register_module(name=[cls.__name__, cls.platform.name], module=cls)
    return cls


def quantizer_class(platform: object) -> Type['BaseQuantizer']:
    """The quantizer of a quantized platform (a :class:`TargetPlatform` or a name).

    Raises:
        KeyError: no quantizer is registered for it; the message lists the keys.

    Example:
        >>> quantizer_class('TRT_INT8').__name__, quantizer_class(TargetPlatform.ORT_INT8).__name__
        ('TensorRTQuantizer', 'ORTQDQQuantizer')
    """
    return registered(QUANTIZERS, getattr(platform, 'name', platform))


_ROLE = TensorRole


class BaseQuantizer:
    """Quantizes the operations of one graph for one platform.

    Subclasses set the class attributes below and register with
    :func:`register_quantizer`.

    Attributes:
        platform: the quantized platform.
        activation: the format of activations (and of inputs that are not weights).
        weight: the format of weights; per-channel on the axis of
            :data:`~razorlib.quantization.quantizers.formats.WEIGHT_CHANNEL_AXIS` (per
            tensor, logged, for a grouped ConvTranspose, whose weight has no such axis).
        bias: the format of the biases of Conv, ConvTranspose and Gemm; None keeps them in
            FP32.  A quantized bias is passive: its scale is input scale x weight scale.
        fusions: op type -> activation types the backend fuses after it.
        residual_fusions: op type (Add) -> the producer types whose output the backend
            fuses into it, quantizing only the sum (empty: none).
        shared_scales: op type -> which of its tensors share one scale.

    Args:
        graph: the graph whose operations to quantize, in place.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import TensorRTQuantizer
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> graph.mark_variable_as_graph_input(x)
        >>> w = graph.create_variable('w', torch.randn(8, 3, 3, 3), is_parameter=True)
        >>> conv = graph.create_operation('Conv', 'conv', inputs=[x, w],
        ...                               outputs=[graph.create_variable('y')])
        >>> quantizer = TensorRTQuantizer(graph)
        >>> quantable = quantizer.quantize_operation('conv')
        >>> [config.policy.name.split('|')[0] for config in quantable.input_quant_config]
        ['PER_TENSOR', 'PER_CHANNEL']
        >>> quantable.input_quant_config[1].channel_axis, quantable.platform.name
        (0, 'TRT_INT8')
    """
    platform: ClassVar[TargetPlatform]
    activation: ClassVar[TensorFormat]
    weight: ClassVar[TensorFormat]
    bias: ClassVar[Optional[TensorFormat]]
    fusions: ClassVar[Mapping[str, FrozenSet[str]]]
    residual_fusions: ClassVar[Mapping[str, FrozenSet[str]]] = {}
    shared_scales: ClassVar[Mapping[str, ScaleSharing]]

    def __init__(self, graph: BaseGraph) -> None:
        self.graph = graph
        self._builders: Dict[TensorRole, Callable[[Operation, Variable],
                                                  TensorQuantizationConfig]] = {
            _ROLE.ACTIVATION: lambda op, var: self.activation.build(),
            _ROLE.WEIGHT: self._weight_config,
            _ROLE.BIAS: self._bias_config,
            _ROLE.NOT_QUANTIZED: lambda op, var: fp32_config(),
        }

    def quantize_operation(self, op_name: str) -> QuantableOperation:
        """Replace an operation by a :class:`QuantableOperation` carrying its configs.

        Every config starts INITIAL, except those of tensors that stay in floating point
        (FP32): shapes, indices and other ``NOT_QUANTIZED`` sockets, values of SOI ops,
        non-float tensors, absent optional inputs, and biases the platform keeps in FP32.

        Args:
            op_name: an operation of the graph, on this quantizer's platform or not
                dispatched yet (it is then placed on the platform).

        Returns:
            The quantable operation, now in the graph in the operation's place.

        Raises:
            ValueError: no such operation, it is quantized already, or it is dispatched to
                another platform.
        """
        op = self.graph.operations.get(op_name)
        if op is None:
            raise ValueError(f'graph {self.graph.name!r} has no operation {op_name!r}')
        if isinstance(op, QuantableOperation):
            raise ValueError(f'operation {op_name!r} is quantized already')
        platform = as_platform(op.platform, parameter=f'operation {op_name!r} platform')
        if platform not in (self.platform, TargetPlatform.UNSPECIFIED):
            raise ValueError(f'operation {op_name!r} is dispatched to {platform.name}, not '
                             f'{self.platform.name}; dispatch it here (a DispatchingTable '
                             'entry) to quantize it')
        config = self.build_config(op)
        op.platform = self.platform
        quantable = QuantableOperation(op, config)
        self.graph.replace_operation(op, quantable)
        return quantable

    def build_config(self, op: Operation) -> OperationQuantizationConfig:
        """Fresh, unlinked configs for every input and output of ``op``."""
        inputs = [self._builders[self.input_role(op, index)](op, var)
                  for index, var in enumerate(op.inputs)]
        outputs = [self._builders[self._output_role(op, index)](op, var)
                   for index, var in enumerate(op.outputs)]
        return OperationQuantizationConfig(inputs, outputs)

    def input_role(self, op: Operation, index: int) -> TensorRole:
        """The role input ``index`` of ``op`` plays once its tensor is looked at.

        The socket's role, except: a weight or bias that is not a parameter is quantized
        as an activation; a value computed by an SOI op, an index output, a tensor of a
        non-float dtype, or an absent optional input (ONNX's empty name, ``Conv(x, w, '')``:
        no tensor to observe or quantize) is ``NOT_QUANTIZED``.
        """
        role, var = op.socket.inputs[index], op.inputs[index]
        if role is _ROLE.NOT_QUANTIZED or var.name == EMPTY_NAME or _holds_control_value(var):
            return _ROLE.NOT_QUANTIZED
        if role in (_ROLE.WEIGHT, _ROLE.BIAS) and not var.is_parameter:
            return _ROLE.ACTIVATION
        return role

    def _output_role(self, op: Operation, index: int) -> TensorRole:
        if _is_non_float(op.outputs[index]):
            return _ROLE.NOT_QUANTIZED
        return op.socket.outputs[index]

    def _weight_config(self, op: Operation, var: Variable) -> TensorQuantizationConfig:
        """The weight format, per channel on :func:`weight_channel_axis` (per tensor, logged,
        for a grouped ConvTranspose)."""
        axis = weight_channel_axis(op)
        if self.weight.per_channel and axis is None and op.type == 'ConvTranspose':
            logger.info('%s: ConvTranspose %r has group %s: %s', type(self).__name__, op.name,
                        op.attributes.get('group'), GROUPED_CONV_TRANSPOSE_PER_TENSOR)
        return self.weight.build(axis)

    def _bias_config(self, op: Operation, var: Variable) -> TensorQuantizationConfig:
        """Biases of layers (Conv, ConvTranspose, Gemm) in the bias format, others FP32."""
        if self.bias is None or op.type not in WEIGHT_CHANNEL_AXIS:
            return fp32_config()
        weight_per_channel = (self.weight.per_channel and self.input_role(op, 1) is _ROLE.WEIGHT
                              and weight_channel_axis(op) is not None)
        return self.bias.build(last_axis(var) if weight_per_channel else None)

    def link_configs(self) -> PassResult:
        """Run the link passes (:data:`~razorlib.quantization.quantizers.links.LINK_PASSES`)
        over the graph, in order, through a :class:`~razorlib.ir.PassManager`.

        Returns:
            The manager's result: ``changes`` counts the links made.
        """
        return PassManager([link(self) for link in LINK_PASSES])(self.graph)


def _is_non_float(var: Variable) -> bool:
    return var.dtype is not None and not var.dtype.is_floating_point


def _holds_control_value(var: Variable) -> bool:
    """A shape, index or other value never quantized: SOI-computed, index output, non-float."""
    if _is_non_float(var):
        return True
    source = var.source_op
    if source is None:
        return False
    return (source.platform is TargetPlatform.SOI
            or source.socket.outputs[source.outputs.index(var)] is _ROLE.NOT_QUANTIZED)
