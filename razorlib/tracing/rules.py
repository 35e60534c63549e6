"""THE table: autograd grad_fn name (as torch 2.13 emits it) -> channel rule.

Each rule reads the channel slots of a node's inputs and returns those of its outputs,
binding slots that must be pruned together and freezing those that cannot be pruned
(see ``docs/tracing_rules.md``).  Kinds:

- ``pass``: per-channel ops, channels unchanged (activations, pooling, resize, dropout).
- ``bind``: elementwise ops of several tensors; their channels are bound.
- ``concat`` / ``split``: channel index offsets (cat, chunk, split, slice, select, unbind).
- ``expand`` / ``permute``: reshape/flatten (a channel owns H*W features), expand,
  repeat, permute/transpose (channels-last layouts), channel shuffle, flip, roll.
- ``reduce``: reductions; over spatial dims they keep channels.
- ``layer``: conv, linear, embedding and norms, recognised by the module owning the weight.
- ``mixing``: ops that mix channels in ways that cannot be sliced; their channels freeze.

An op missing from the table freezes the channels that reach it (kind ``unknown-op``),
or raises :class:`TracingError` under ``strict=True``.

The table is the ``TRACING_RULES`` registry (grad_fn name -> :class:`Rule`).  To add or
override a rule from outside razorlib, register it under the grad_fn name
(``tensor.grad_fn.name()``)::

    TRACING_RULES.register_module('MyOpBackward0', module=Rule(my_rule, 'bind'),
                                  force=True)

Rules for the ops layers run on their weights live in the layer kinds
(:mod:`razorlib.layers`); add a kind there, not a rule, for a new module type.
"""
from dataclasses import dataclass
from typing import Callable, Dict

from ..registry import TRACING_RULES
from . import basic_rules as basic
from . import heads
from . import layer_rules as layer
from . import shape_rules as shape


@dataclass(frozen=True)
class Rule:
    """A channel rule.

    Args:
        fn: ``fn(ctx, node, inputs) -> outputs`` (see :mod:`.basic_rules`).
        kind: one of the kinds in the module docstring (for docs and reports).
        keeps_pending: the rule understands dims split by a reshape that still have to
            be merged back (elementwise ops, permutes, reshapes); for any other rule the
            tracer freezes such channels first.
        sizes: where the op's sizes come from: ``'none'`` (its inputs, or dims only),
            ``'code'`` (view, expand, split, slice: the model's code, maybe as literals),
            ``'module'`` (norms: the module owning them, else the code), ``'shifts'``
            (roll: the code's shifts, which matter only along a channel dim).  Channels
            that reach code-sized ops are checked by a pruned run
            (``tracing/literal_sizes.py``).
    """
    fn: Callable
    kind: str
    keeps_pending: bool = False
    sizes: str = 'none'

    def __call__(self, ctx, node, ins):
        return self.fn(ctx, node, ins)


PASS = Rule(basic.pass_through, 'pass', keeps_pending=True)
BIND = Rule(basic.elementwise, 'bind', keeps_pending=True)
RESHAPE = Rule(shape.reshape, 'expand', keeps_pending=True, sizes='code')
SQUEEZE = Rule(shape.reshape, 'expand', keeps_pending=True)
PERMUTE = Rule(shape.permute, 'permute', keeps_pending=True)
REDUCE = Rule(basic.reduction, 'reduce')
MIXING = Rule(basic.mixing, 'mixing')
ALONG_DIM = Rule(basic.along_dim, 'mixing')


def copy_into(ctx, node, ins):
    """``dest.copy_(src)`` (``CopyBackwards``): the output holds ``src``'s values
    broadcast into ``dest``'s shape, so it carries ``src``'s channels and none of
    ``dest``'s, whose values are gone (a cache's state written in place: Mamba's
    ``update_conv_state`` on a ``meta`` trace, which keeps the cache)."""
    return basic.pass_through(ctx, node, ins[1:])


_PASS_NAMES = (
    # activations
    'ReluBackward0', 'HardtanhBackward0', 'LeakyReluBackward0', 'EluBackward0',
    'CeluBackward0', 'GeluBackward0', 'SiluBackward0', 'MishBackward0', 'SoftplusBackward0',
    'SigmoidBackward0', 'TanhBackward0', 'HardswishBackward0', 'HardsigmoidBackward0',
    'LogSigmoidBackward0', 'ThresholdBackward0', 'ClampBackward1', 'ClampMinBackward0',
    'LeakyReluBackward1', 'EluBackward1', 'CeluBackward1', 'ThresholdBackward1',
    'RreluWithNoiseBackward0', 'RreluWithNoiseBackward1',
    'ClampMaxBackward0',
    # custom autograd Functions of model code: transformers' BLOOM GeLU (BloomGelu)
    'GeLUFunctionBackward',
    # unary math (the scalar partner of x * 2 or x + 1 is untracked)
    'NegBackward0', 'AbsBackward0', 'ExpBackward0', 'LogBackward0', 'SqrtBackward0',
    'RsqrtBackward0', 'ReciprocalBackward0', 'PowBackward0', 'ErfBackward0', 'SinBackward0',
    'CosBackward0', 'RsubBackward1', 'AddBackward1', 'SubBackward1', 'MulBackward1',
    'DivBackward1', 'DivBackward3', 'SgnBackward0', 'MaskedFillBackward0',
    'Expm1Backward0', 'Log1PBackward0', 'Exp2Backward0', 'Log2Backward0', 'Log10Backward0',
    'SinhBackward0', 'CoshBackward0', 'TanBackward0', 'AtanBackward0', 'AsinhBackward0',
    'ErfcBackward0', 'SignBackward0', 'FloorBackward0', 'CeilBackward0', 'RoundBackward0',
    'TruncBackward0', 'FracBackward0', 'SoftshrinkBackward0', 'HardshrinkBackward0',
    'NanToNumBackward0',
    # pooling and resizing
    'MaxPool2DWithIndicesBackward0', 'MaxPool3DWithIndicesBackward0',
    'AvgPool2DBackward0', 'AvgPool3DBackward0', 'AdaptiveAvgPool2DBackward0',
    'AdaptiveAvgPool3DBackward0', 'AdaptiveMaxPool2DBackward0', 'AdaptiveMaxPool3DBackward0',
    'UpsampleNearest1DBackward0', 'UpsampleNearest2DBackward0', 'UpsampleNearest3DBackward0',
    'UpsampleNearestExact1DBackward0', 'UpsampleNearestExact2DBackward0',
    'UpsampleNearestExact3DBackward0', 'UpsampleLinear1DBackward0',
    'UpsampleBilinear2DBackward0', 'UpsampleBicubic2DBackward0',
    'UpsampleTrilinear3DBackward0', 'ConstantPadNdBackward0', 'ReflectionPad1DBackward0',
    'ReflectionPad2DBackward0', 'ReflectionPad3DBackward0', 'ReplicationPad1DBackward0',
    'ReplicationPad2DBackward0', 'ReplicationPad3DBackward0',
    # copies, dropout
    'CloneBackward0', 'AliasBackward0', 'ToCopyBackward0', 'NativeDropoutBackward0',
    'FusedDropoutBackward0',
)

_BIND_NAMES = ('AddBackward0', 'SubBackward0', 'MulBackward0', 'DivBackward0', 'DivBackward2',
               'ClampBackward0',
               'RsubBackward0', 'MaximumBackward0', 'MinimumBackward0', 'WhereBackward0',
               'AddcmulBackward0', 'AddcdivBackward0', 'LerpBackward0', 'LerpBackward1',
               'PowBackward1', 'Atan2Backward0', 'HypotBackward0')

_REDUCE_NAMES = ('SumBackward0', 'SumBackward1', 'MeanBackward0', 'MeanBackward1',
                 'MaxBackward0', 'MaxBackward1', 'MinBackward0', 'MinBackward1',
                 'AmaxBackward0', 'AminBackward0', 'StdBackward0', 'VarBackward0',
                 'LinalgVectorNormBackward0', 'NormBackward1', 'LogsumexpBackward0',
                 'ProdBackward1')

_RESHAPE_NAMES = ('ViewBackward0', 'UnsafeViewBackward0', 'ReshapeAliasBackward0')
_SQUEEZE_NAMES = ('SqueezeBackward0', 'SqueezeBackward1', 'SqueezeBackward2',
                  'UnsqueezeBackward0')

_MIXING_NAMES = ('IndexSelectBackward0', 'GatherBackward0',
                 'PixelShuffleBackward0', 'PixelUnshuffleBackward0', 'GluBackward0',
                 'Im2ColBackward0', 'Col2ImBackward0',
                 'AsStridedBackward0', 'torch::autograd::CopySlices', 'SortBackward0',
                 'TopkBackward0')

#: F.scaled_dot_product_attention's fused kernels (the math one decomposes into matmuls).
_ATTENTION_NAMES = ('ScaledDotProductFlashAttentionForCpuBackward0',
                    'ScaledDotProductEfficientAttentionBackward0',
                    'ScaledDotProductFlashAttentionBackward0',
                    'ScaledDotProductCudnnAttentionBackward0')

_BUILT_IN: Dict[str, Rule] = {
    **{name: PASS for name in _PASS_NAMES},
    **{name: BIND for name in _BIND_NAMES},
    **{name: REDUCE for name in _REDUCE_NAMES},
    **{name: RESHAPE for name in _RESHAPE_NAMES},
    **{name: SQUEEZE for name in _SQUEEZE_NAMES},
    **{name: MIXING for name in _MIXING_NAMES},
    **{name: Rule(heads.scaled_dot_product_attention, 'attention')
       for name in _ATTENTION_NAMES},
    'SoftmaxBackward0': ALONG_DIM,
    'SafeSoftmaxBackward0': ALONG_DIM,
    'LogSoftmaxBackward0': ALONG_DIM,
    'CumsumBackward0': ALONG_DIM,
    'PermuteBackward0': PERMUTE,
    'TransposeBackward0': PERMUTE,
    'TBackward0': PERMUTE,
    'ChannelShuffleBackward0': Rule(shape.channel_shuffle, 'permute'),
    'ExpandBackward0': Rule(shape.expand, 'expand', keeps_pending=True, sizes='code'),
    'ViewAsComplexBackward0': Rule(shape.complex_view, 'expand', keeps_pending=True),
    'ViewAsRealBackward0': Rule(shape.complex_view, 'expand', keeps_pending=True),
    'RepeatBackward0': Rule(shape.repeat, 'expand', sizes='code'),
    'FlipBackward0': Rule(shape.flip, 'permute'),
    'RollBackward0': Rule(shape.roll, 'permute', sizes='shifts'),
    'IndexBackward0': Rule(shape.index, 'mixing'),
    'CatBackward0': Rule(shape.concat, 'concat'),
    'StackBackward0': Rule(shape.stack, 'concat'),
    'SplitBackward0': Rule(shape.split, 'split', sizes='code'),
    'SplitWithSizesBackward0': Rule(shape.split, 'split', sizes='code'),
    'UnbindBackward0': Rule(shape.unbind, 'split', keeps_pending=True, sizes='code'),
    'SliceBackward0': Rule(shape.slice_, 'split', sizes='code'),
    'SelectBackward0': Rule(shape.select, 'split', keeps_pending=True, sizes='code'),
    'BmmBackward0': Rule(basic.matmul, 'bind'),
    'IndexAddBackward0': Rule(basic.index_add, 'bind'),
    'ConvolutionBackward0': Rule(layer.convolution, 'layer'),
    'AddmmBackward0': Rule(layer.addmm, 'layer'),
    'MmBackward0': Rule(layer.mm, 'layer'),
    'EmbeddingBackward0': Rule(layer.embedding, 'layer'),
    'NativeBatchNormBackward0': Rule(layer.norm, 'layer', sizes='module'),
    'CudnnBatchNormBackward0': Rule(layer.norm, 'layer', sizes='module'),
    'MiopenBatchNormBackward0': Rule(layer.norm, 'layer', sizes='module'),
    'NativeLayerNormBackward0': Rule(layer.layer_norm, 'layer', sizes='module'),
    'NativeGroupNormBackward0': Rule(layer.norm, 'layer', sizes='module'),
    'PreluKernelBackward0': Rule(layer.prelu, 'layer'),
    'torch::autograd::CopyBackwards': Rule(copy_into, 'pass'),
}

for _name, _rule in _BUILT_IN.items():
    TRACING_RULES.register_module(_name, module=_rule)

#: The live table (the registry's dict): grad_fn name -> rule.
RULES: Dict[str, Rule] = TRACING_RULES.module_dict

UNKNOWN = Rule(basic.unknown, 'unknown')


def rule_for(grad_fn_name: str) -> Rule:
    """The rule for a grad_fn name; the freezing fallback for names not in the table.

    Example:
        >>> rule_for('ReluBackward0').kind, rule_for('NoSuchBackward0').kind
        ('pass', 'unknown')
    """
    return RULES.get(grad_fn_name, UNKNOWN)
