"""Link passes: join the configs of a quantized graph that must agree, in one fixed order.

Each pass is a :class:`~razorlib.ir.GraphPass` built with the quantizer whose rules it
applies; it walks the graph's :class:`~razorlib.ir.QuantableOperation`\\ s, links configs,
and returns a :class:`~razorlib.ir.PassResult` whose ``changes`` counts the links made.
Only INITIAL configs are linked; a config made OVERLAPPED or FP32 stays out of every later
pass.  :meth:`BaseQuantizer.link_configs` runs them, in this order, through a
:class:`~razorlib.ir.PassManager`:

1. ``FuseActivations``: an op whose only reader is an activation the platform fuses into
   it (Conv -> Relu; on TensorRT Add -> Relu too) is quantized once, after the
   activation.  The op's output config and the activation's input config become
   OVERLAPPED, each with ``master_by`` set to the activation's output config, which
   quantizes in their place.
   (Dominance would share the state too, so an overlapped config is not dominated.)
2. ``FuseResidualAdds``: a compute op whose only reader is an Add the platform fuses it
   with (TensorRT's Conv + residual Add) is not quantized on its own: its output config
   and the Add's input config become OVERLAPPED, mastered by the config that quantizes
   the Add's result (the Add's output, or the activation fused after the Add).  One
   input per Add is fused, the first in input order; the others stay quantized.
3. ``ShareScales``: the op types of ``quantizer.shared_scales`` get their inputs (and
   outputs) joined with ``dominated_by``: a Concat's inputs take the Concat output's
   scale.
4. ``MasterBiases``: a quantized bias gets ``master_by`` = its layer's weight config; its
   scale is then input scale x weight scale, the layer's input being input 0.
5. ``JoinVariableReaders``: the output config of an activation and the input configs
   of its quantized readers are joined, so each variable is quantized with one scale.

Configs are joined only when they have the same format (policy, bits, integer range,
rounding, channel axis).  Joined sets merge (a Concat input joins its producer's set and
the Concat's), and which member ends up the root depends on the order of the joins:
compare roots, ``a.dominated_by is b.dominated_by``.
"""
from typing import Collection, List, Optional, Sequence, Tuple, Type

from ...ir import (BaseGraph, GraphPass, Operation, PassResult, QuantableOperation,
                   QuantizationStates, TensorQuantizationConfig, TensorRole)
from ...registry import GRAPH_PASSES
from .formats import ScaleSharing

__all__ = ['FuseActivations', 'FuseResidualAdds', 'JoinVariableReaders', 'LINK_PASSES',
           'LinkPass', 'MasterBiases', 'ShareScales']

_INITIAL = QuantizationStates.INITIAL


def _quantables(graph) -> List[QuantableOperation]:
    return [op for op in graph.topological_sort() if isinstance(op, QuantableOperation)]


def _format(config: TensorQuantizationConfig):
    return (config.policy, config.num_of_bits, config.quant_min, config.quant_max,
            config.rounding, config.channel_axis)


def _join(configs: Sequence[TensorQuantizationConfig]) -> int:
    """Join the INITIAL ``configs`` that share the first one's format into its set."""
    configs = [config for config in configs if config.state is _INITIAL]
    if not configs:
        return 0
    root = configs[0]
    links = 0
    for config in configs[1:]:
        if _format(config) == _format(root) and config.dominated_by is not root.dominated_by:
            config.dominated_by = root
            links += 1
    return links


class LinkPass(GraphPass):
    """Base of the link passes: holds the quantizer whose rules (``fusions``,
    ``residual_fusions``, ``shared_scales``, ``input_role``) they apply.

    Args:
        quantizer: a :class:`~razorlib.quantization.quantizers.base.BaseQuantizer`.
    """

    def __init__(self, quantizer) -> None:
        self.quantizer = quantizer

    def call(self, graph: BaseGraph) -> PassResult:
        """Link the configs of ``graph``; ``changes`` counts the links."""
        return PassResult.counted(graph, self.link(graph))

    def link(self, graph: BaseGraph) -> int:
        """Make this pass's links; how many."""
        raise NotImplementedError


@GRAPH_PASSES.register_module(name=['FuseActivations', 'fuse_activations'])
class FuseActivations(LinkPass):
    """Pass 1: an op (compute op, TensorRT's Add) + fused activation: quantized once, after.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import TensorRTQuantizer
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> w = graph.create_variable('w', torch.randn(4, 3, 1, 1), is_parameter=True)
        >>> conv = graph.create_operation('Conv', 'conv', inputs=[x, w],
        ...                               outputs=[graph.create_variable()])
        >>> relu = graph.create_operation('Relu', 'relu', inputs=conv.outputs,
        ...                               outputs=[graph.create_variable()])
        >>> quantizer = TensorRTQuantizer(graph)
        >>> conv, relu = [quantizer.quantize_operation(name) for name in ('conv', 'relu')]
        >>> FuseActivations(quantizer)(graph).changes, conv.output_quant_config[0].state.name
        (1, 'OVERLAPPED')
        >>> conv.output_quant_config[0].master_by is relu.output_quant_config[0]
        True
    """

    def link(self, graph: BaseGraph) -> int:
        links = 0
        for op in _quantables(graph):
            activation = _fused_reader(graph, op, self.quantizer.fusions.get(op.type, ()))
            if activation is None:
                continue
            fused = activation.output_quant_config[0]
            overlapped = (op.output_quant_config[0], activation.input_quant_config[0])
            if any(config.state is not _INITIAL for config in (fused, *overlapped)):
                continue
            _overlap(overlapped, fused)
            links += 1
        return links


def _overlap(configs: Sequence[TensorQuantizationConfig],
             master: TensorQuantizationConfig) -> None:
    """Leave ``configs``' tensors to ``master``, which quantizes in their place."""
    for config in configs:
        config.state = QuantizationStates.OVERLAPPED
        config.master_by = master


def _only_reader(graph, op: Operation) -> Optional[QuantableOperation]:
    """The quantized op that alone reads ``op``'s only output, once; not a graph output."""
    if op.num_of_output != 1 or op.outputs[0].name in graph.outputs:
        return None
    readers = op.outputs[0].dest_ops
    if (len(readers) == 1 and isinstance(readers[0], QuantableOperation)
            and readers[0].inputs.count(op.outputs[0]) == 1):
        return readers[0]
    return None


def _fused_reader(graph, op: QuantableOperation,
                  fusable: Collection[str]) -> Optional[QuantableOperation]:
    """The activation fused after ``op``: the only reader of its only output, quantized."""
    reader = _only_reader(graph, op)
    if reader is not None and reader.type in fusable and reader.inputs[0] is op.outputs[0]:
        return reader
    return None


@GRAPH_PASSES.register_module(name=['FuseResidualAdds', 'fuse_residual_adds'])
class FuseResidualAdds(LinkPass):
    """Pass 2: a compute op feeding only an Add is fused into it, quantized after it.

    TensorRT runs ``Conv -> Add(residual) [-> Relu]`` as one kernel: the convolution's
    int32 accumulator is dequantized, the int8 residual added, the activation applied
    and the sum quantized once.  The convolution's own output is never int8, so
    quantizing it would add a rounding the engine does not make.  An Add with several
    such producers fuses its first; the others are quantized like any residual.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import TensorRTQuantizer
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> w = graph.create_variable('w', torch.randn(3, 3, 1, 1), is_parameter=True)
        >>> conv = graph.create_operation('Conv', 'conv', inputs=[x, w],
        ...                               outputs=[graph.create_variable('y')])
        >>> add = graph.create_operation('Add', 'add', inputs=[conv.outputs[0], x],
        ...                              outputs=[graph.create_variable('z')])
        >>> quantizer = TensorRTQuantizer(graph)
        >>> conv, add = [quantizer.quantize_operation(name) for name in ('conv', 'add')]
        >>> FuseResidualAdds(quantizer)(graph).changes
        1
        >>> [c.state.name for c in (conv.output_quant_config[0], *add.input_quant_config)]
        ['OVERLAPPED', 'OVERLAPPED', 'INITIAL']
        >>> conv.output_quant_config[0].master_by is add.output_quant_config[0]
        True
    """

    def link(self, graph: BaseGraph) -> int:
        links = 0
        for op in _quantables(graph):
            fusable = self.quantizer.residual_fusions.get(op.type)
            if not fusable:
                continue
            fused = op.output_quant_config[0]
            if fused.state is QuantizationStates.OVERLAPPED:  # an activation after the Add
                fused = fused.master_by
            if fused is None or fused.state is not _INITIAL:
                continue
            for index, var in enumerate(op.inputs):
                source = var.source_op
                if (isinstance(source, QuantableOperation) and source.type in fusable
                        and _only_reader(graph, source) is op
                        and source.output_quant_config[0].state is _INITIAL
                        and all(config.state is _INITIAL for config in op.input_quant_config)):
                    _overlap((source.output_quant_config[0], op.input_quant_config[index]),
                             fused)
                    links += 1
                    break
        return links


@GRAPH_PASSES.register_module(name=['ShareScales', 'share_scales'])
class ShareScales(LinkPass):
    """Pass 3: join the tensors of the op types in ``quantizer.shared_scales``."""

    def link(self, graph: BaseGraph) -> int:
        links = 0
        for op in _quantables(graph):
            sharing = self.quantizer.shared_scales.get(op.type)
            if sharing is None:
                continue
            configs = list(op.input_quant_config)
            if sharing is ScaleSharing.INPUTS_AND_OUTPUTS:
                configs = list(op.output_quant_config) + configs
            links += _join(configs)
        return links


@GRAPH_PASSES.register_module(name=['MasterBiases', 'master_biases'])
class MasterBiases(LinkPass):
    """Pass 4: each quantized bias is mastered by its layer's weight config."""

    def link(self, graph: BaseGraph) -> int:
        links = 0
        for op in _quantables(graph):
            for index, config in enumerate(op.input_quant_config):
                weight = op.input_quant_config[1] if index > 1 else None
                if (config.state is _INITIAL and weight is not None
                        and config.master_by is not weight
                        and self.quantizer.input_role(op, index) is TensorRole.BIAS):
                    config.master_by = weight
                    links += 1
        return links


@GRAPH_PASSES.register_module(name=['JoinVariableReaders', 'join_variable_readers'])
class JoinVariableReaders(LinkPass):
    """Pass 5: one scale per activation: its producer's output config and its readers'."""

    def link(self, graph: BaseGraph) -> int:
        links = 0
        for var in graph.variables.values():
            if var.is_parameter:
                continue
            configs: List[TensorQuantizationConfig] = []
            source = var.source_op
            if isinstance(source, QuantableOperation):
                configs.append(source.output_quant_config[source.outputs.index(var)])
            for reader in dict.fromkeys(var.dest_ops):
                if isinstance(reader, QuantableOperation):
                    configs += [config for config, read in zip(reader.input_quant_config,
                                                               reader.inputs) if read is var]
            links += _join(configs)
        return links


LINK_PASSES: Tuple[Type[LinkPass], ...] = (FuseActivations, FuseResidualAdds, ShareScales,
                                           MasterBiases, JoinVariableReaders)
"""The link passes, in the order ``BaseQuantizer.link_configs`` runs them."""
