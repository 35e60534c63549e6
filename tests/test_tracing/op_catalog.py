"""Ops that produce each grad_fn name of the rule table (as torch 2.13 emits them on CPU).

Each entry maps a grad_fn name to a function of the channel tensor ``x`` (shape
1x8x6x6, produced by a conv) returning a tensor whose grad_fn has that name.  Bind
entries take two tensors.
"""
import torch
import torch.nn.functional as F


class GeLUFunction(torch.autograd.Function):
    """Stands for transformers' BLOOM GeLU, a custom autograd Function of this name (the
    name is all the table sees: ``GeLUFunctionBackward``)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, grad):
        (x, ) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            y = x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))
            return torch.autograd.grad(y, x, grad)[0]


PASS_OPS = {
    'ReluBackward0': F.relu,
    'HardtanhBackward0': F.relu6,
    'LeakyReluBackward0': F.leaky_relu,
    'EluBackward0': F.elu,
    'CeluBackward0': F.celu,
    'GeluBackward0': F.gelu,
    'SiluBackward0': F.silu,
    'MishBackward0': F.mish,
    'SoftplusBackward0': F.softplus,
    'SigmoidBackward0': torch.sigmoid,
    'TanhBackward0': torch.tanh,
    'HardswishBackward0': F.hardswish,
    'HardsigmoidBackward0': F.hardsigmoid,
    'LogSigmoidBackward0': F.logsigmoid,
    'ThresholdBackward0': lambda x: F.threshold(x, 0.1, 0.0),
    'ClampBackward1': lambda x: x.clamp(-1, 1),
    'LeakyReluBackward1': lambda x: F.leaky_relu(x.clone(), inplace=True),
    'EluBackward1': lambda x: F.elu(x.clone(), inplace=True),
    'CeluBackward1': lambda x: F.celu(x.clone(), inplace=True),
    'ThresholdBackward1': lambda x: F.threshold(x.clone(), 0.1, 0.0, inplace=True),
    'RreluWithNoiseBackward0': lambda x: F.rrelu(x, training=False),
    'RreluWithNoiseBackward1': lambda x: F.rrelu(x.clone(), training=False, inplace=True),
    'ClampMinBackward0': lambda x: torch.clamp_min(x, 0.0),
    'ClampMaxBackward0': lambda x: torch.clamp_max(x, 0.0),
    'NegBackward0': torch.neg,
    'AbsBackward0': torch.abs,
    'ExpBackward0': torch.exp,
    'LogBackward0': lambda x: torch.log(x.abs() + 1),
    'SqrtBackward0': lambda x: torch.sqrt(x * x + 1),
    'RsqrtBackward0': lambda x: torch.rsqrt(x * x + 1),
    'ReciprocalBackward0': lambda x: torch.reciprocal(x * x + 1),
    'PowBackward0': lambda x: x ** 2,
    'ErfBackward0': torch.erf,
    'SinBackward0': torch.sin,
    'CosBackward0': torch.cos,
    'RsubBackward1': lambda x: 1 - x,
    'AddBackward1': lambda x: torch.ops.aten.add.Scalar(x, 1.0),
    'SubBackward1': lambda x: torch.ops.aten.sub.Scalar(x, 1.0),
    'MulBackward1': lambda x: torch.ops.aten.mul.Scalar(x, 2.0),
    'DivBackward1': lambda x: torch.ops.aten.div.Scalar(x, 2.0),
    'DivBackward3': lambda x: torch.ops.aten.div.Scalar_mode(x, 2.0, rounding_mode=None),
    'SgnBackward0': torch.sgn,
    'MaskedFillBackward0': lambda x: x.masked_fill(x.detach() > 1, 0.0),
    'Expm1Backward0': torch.expm1,
    'Log1PBackward0': lambda x: torch.log1p(x.abs()),
    'Exp2Backward0': torch.exp2,
    'Log2Backward0': lambda x: torch.log2(x.abs() + 1),
    'Log10Backward0': lambda x: torch.log10(x.abs() + 1),
    'SinhBackward0': torch.sinh,
    'CoshBackward0': torch.cosh,
    'TanBackward0': torch.tan,
    'AtanBackward0': torch.atan,
    'AsinhBackward0': torch.asinh,
    'ErfcBackward0': torch.erfc,
    'SignBackward0': torch.sign,
    'FloorBackward0': torch.floor,
    'CeilBackward0': torch.ceil,
    'RoundBackward0': torch.round,
    'TruncBackward0': torch.trunc,
    'FracBackward0': torch.frac,
    'SoftshrinkBackward0': F.softshrink,
    'HardshrinkBackward0': F.hardshrink,
    'NanToNumBackward0': torch.nan_to_num,
    'GeLUFunctionBackward': lambda x: GeLUFunction.apply(x),
    'MaxPool2DWithIndicesBackward0': lambda x: F.max_pool2d(x, 2),
    'MaxPool3DWithIndicesBackward0': lambda x: F.max_pool3d(x.unsqueeze(2), (1, 2, 2)),
    'AvgPool2DBackward0': lambda x: F.avg_pool2d(x, 2),
    'AvgPool3DBackward0': lambda x: F.avg_pool3d(x.unsqueeze(2), (1, 2, 2)),
    'AdaptiveAvgPool2DBackward0': lambda x: F.adaptive_avg_pool2d(x, 3),
    'AdaptiveAvgPool3DBackward0': lambda x: F.adaptive_avg_pool3d(x.unsqueeze(2), (1, 3, 3)),
    'AdaptiveMaxPool2DBackward0': lambda x: F.adaptive_max_pool2d(x, 3),
    'AdaptiveMaxPool3DBackward0': lambda x: F.adaptive_max_pool3d(x.unsqueeze(2), (1, 3, 3)),
    'UpsampleNearest1DBackward0': lambda x: F.interpolate(x.flatten(2), scale_factor=2.0),
    'UpsampleNearest2DBackward0': lambda x: F.interpolate(x, scale_factor=2.0),
    'UpsampleNearest3DBackward0': lambda x: F.interpolate(x.unsqueeze(2),
                                                          scale_factor=(1.0, 2.0, 2.0)),
    'UpsampleNearestExact1DBackward0': lambda x: F.interpolate(x.flatten(2), scale_factor=2.0,
                                                               mode='nearest-exact'),
    'UpsampleNearestExact2DBackward0': lambda x: F.interpolate(x, scale_factor=2.0,
                                                               mode='nearest-exact'),
    'UpsampleNearestExact3DBackward0': lambda x: F.interpolate(
        x.unsqueeze(2), scale_factor=(1.0, 2.0, 2.0), mode='nearest-exact'),
    'UpsampleLinear1DBackward0': lambda x: F.interpolate(x.flatten(2), scale_factor=2.0,
                                                         mode='linear'),
    'UpsampleBilinear2DBackward0': lambda x: F.interpolate(x, scale_factor=2.0, mode='bilinear'),
    'UpsampleBicubic2DBackward0': lambda x: F.interpolate(x, scale_factor=2.0, mode='bicubic'),
    'UpsampleTrilinear3DBackward0': lambda x: F.interpolate(
        x.unsqueeze(2), scale_factor=(1.0, 2.0, 2.0), mode='trilinear'),
    'ConstantPadNdBackward0': lambda x: F.pad(x, (1, 1, 1, 1)),
    'ReflectionPad1DBackward0': lambda x: F.pad(x.flatten(2), (1, 1), mode='reflect'),
    'ReflectionPad2DBackward0': lambda x: F.pad(x, (1, 1, 1, 1), mode='reflect'),
    'ReflectionPad3DBackward0': lambda x: F.pad(x.unsqueeze(2), (1, 1, 1, 1, 0, 0),
                                                mode='reflect'),
    'ReplicationPad1DBackward0': lambda x: F.pad(x.flatten(2), (1, 1), mode='replicate'),
    'ReplicationPad2DBackward0': lambda x: F.pad(x, (1, 1, 1, 1), mode='replicate'),
    'ReplicationPad3DBackward0': lambda x: F.pad(x.unsqueeze(2), (1, 1, 1, 1, 0, 0),
                                                 mode='replicate'),
    'CloneBackward0': torch.clone,
    'AliasBackward0': lambda x: x[...],
    'ToCopyBackward0': lambda x: x.double().float(),
    'NativeDropoutBackward0': lambda x: torch.native_dropout(x, 0.5, True)[0],
}

BIND_OPS = {
    'AddBackward0': torch.add,
    'SubBackward0': torch.sub,
    'MulBackward0': torch.mul,
    'DivBackward0': lambda a, b: a / (b * b + 1),
    'DivBackward2': lambda a, b: torch.div(a, b * b + 1, rounding_mode=None),
    'ClampBackward0': lambda a, b: torch.clamp(a, min=b),
    'RsubBackward0': torch.rsub,
    'MaximumBackward0': torch.maximum,
    'MinimumBackward0': torch.minimum,
    'WhereBackward0': lambda a, b: torch.where(a.detach() > 0, a, b),
    'AddcmulBackward0': lambda a, b: torch.addcmul(a, a, b),
    'AddcdivBackward0': lambda a, b: torch.addcdiv(a, a, b * b + 1),
    'LerpBackward0': lambda a, b: torch.lerp(a, b, 0.3),
    'LerpBackward1': lambda a, b: torch.lerp(a, b, torch.sigmoid(a)),
    'PowBackward1': lambda a, b: torch.pow(a.abs() + 1, b),
    'Atan2Backward0': torch.atan2,
    'HypotBackward0': torch.hypot,
}

# Reductions over the spatial dims keep channels; ``channel_ops`` reduce over dim 1.
REDUCE_SPATIAL_OPS = {
    'SumBackward1': lambda x: x.sum((2, 3)),
    'MeanBackward1': lambda x: x.mean((2, 3), keepdim=True),
    'MaxBackward0': lambda x: x.flatten(2).max(2)[0],
    'MinBackward0': lambda x: x.flatten(2).min(2)[0],
    'AmaxBackward0': lambda x: x.amax((2, 3)),
    'AminBackward0': lambda x: x.amin((2, 3)),
    'StdBackward0': lambda x: x.std((2, 3)),
    'VarBackward0': lambda x: x.var((2, 3)),
    'LinalgVectorNormBackward0': lambda x: torch.linalg.vector_norm(x, dim=(2, 3)),
    'NormBackward1': lambda x: torch.ops.aten.norm.ScalarOpt_dim(x, 2, [3]),
    'LogsumexpBackward0': lambda x: x.logsumexp(3),
    'ProdBackward1': lambda x: x.prod(3),
}
REDUCE_CHANNEL_OPS = {
    'MeanBackward1': lambda x: x.mean(1),
    'AmaxBackward0': lambda x: x.amax(1),
    'StdBackward0': lambda x: x.std(1),
}
REDUCE_ALL_OPS = {
    'SumBackward0': torch.sum,
    'MeanBackward0': torch.mean,
    'MaxBackward1': torch.max,
    'MinBackward1': torch.min,
}

MIXING_OPS = {
    'IndexBackward0': lambda x: x[:, [0, 2, 3]],
    'IndexSelectBackward0': lambda x: x.index_select(1, torch.tensor([0, 2])),
    'GatherBackward0': lambda x: x.gather(1, torch.zeros(1, 2, 6, 6, dtype=torch.long)),
    'PixelShuffleBackward0': lambda x: F.pixel_shuffle(x, 2),
    'PixelUnshuffleBackward0': lambda x: F.pixel_unshuffle(x, 2),
    'GluBackward0': lambda x: F.glu(x, 1),
    'Im2ColBackward0': lambda x: F.unfold(x, 2),
    'AsStridedBackward0': lambda x: x.as_strided((1, 4, 6, 6), (288, 36, 6, 1)),
    'torch::autograd::CopySlices': lambda x: _copy_slices(x),
    'SortBackward0': lambda x: x.sort(1)[0],
    'TopkBackward0': lambda x: x.topk(2, 1)[0],
    'Col2ImBackward0': lambda x: F.fold(x.flatten(2), (6, 6), 1),
}

ALONG_DIM_OPS = {
    'SoftmaxBackward0': lambda x, d: x.softmax(d),
    'SafeSoftmaxBackward0': lambda x, d: torch.ops.aten._safe_softmax(x, d),
    'LogSoftmaxBackward0': lambda x, d: x.log_softmax(d),
    'CumsumBackward0': lambda x, d: x.cumsum(d),
}

# Names in the table that CPU torch cannot produce (GPU backends) or that need a
# dedicated test elsewhere.
NOT_ON_CPU = {
    'CudnnBatchNormBackward0', 'MiopenBatchNormBackward0', 'FusedDropoutBackward0',
    'ScaledDotProductEfficientAttentionBackward0', 'ScaledDotProductFlashAttentionBackward0',
    'ScaledDotProductCudnnAttentionBackward0',
}


def _copy_slices(x):
    y = x.clone()
    y[:, :2] = y[:, :2] * 2
    return y
