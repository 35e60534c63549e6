"""Normalizations: BatchNormalization (inference), Instance, Layer and Group normalization."""
from typing import List

import torch
import torch.nn.functional as F

from ...operation import Operation
from ..kernels import UnsupportedOperationError, register_kernel

__all__: List[str] = []


@register_kernel('BatchNormalization')
def _batch_norm(op: Operation, device: torch.device):
    """Inference only: the running statistics normalize, nothing is updated."""
    if op.attributes.get('training_mode', 0) or op.num_of_output > 1:
        raise UnsupportedOperationError(op, 'training mode (or its statistics outputs)')
    epsilon = op.attributes.get('epsilon', 1e-5)
    return lambda x, scale, bias, mean, var: F.batch_norm(x, mean, var, scale, bias, False,
                                                          0.0, epsilon)


@register_kernel('InstanceNormalization')
def _instance_norm(op: Operation, device: torch.device):
    epsilon = op.attributes.get('epsilon', 1e-5)
    return lambda x, scale, bias: F.instance_norm(x, weight=scale, bias=bias, eps=epsilon)


@register_kernel('LayerNormalization')
def _layer_norm(op: Operation, device: torch.device):
    """Over dims ``axis..-1``; the optional Mean and InvStdDev outputs keep those dims as 1."""
    axis, epsilon = op.attributes.get('axis', -1), op.attributes.get('epsilon', 1e-5)
    statistics = op.num_of_output > 1

    def kernel(x, scale, bias=None):
        shape = x.shape[axis:]
        if scale.shape != shape:
            scale = scale.expand(shape)
        if bias is not None and bias.shape != shape:
            bias = bias.expand(shape)
        out = F.layer_norm(x, shape, scale, bias, epsilon)
        if not statistics:
            return out
        dims = tuple(range(axis % x.dim(), x.dim()))
        var, mean = torch.var_mean(x, dims, correction=0, keepdim=True)
        return out, mean, torch.rsqrt(var + epsilon)
    return kernel


@register_kernel('GroupNormalization')
def _group_norm(op: Operation, device: torch.device):
    """Scale and bias per channel (opset 21) or per group (opset 18, repeated per channel)."""
    groups, epsilon = op.attributes['num_groups'], op.attributes.get('epsilon', 1e-5)

    def kernel(x, scale, bias):
        channels = x.shape[1]
        if scale.numel() != channels:
            scale = scale.repeat_interleave(channels // groups)
            bias = bias.repeat_interleave(channels // groups)
        return F.group_norm(x, groups, scale, bias, epsilon)
    return kernel
