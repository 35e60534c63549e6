"""Kinds of the normalisation layers: BatchNorm/SyncBatchNorm, LayerNorm, GroupNorm,
InstanceNorm, RMSNorm.  Their one channel axis (``out``) follows their input's channels."""
import inspect
from functools import lru_cache
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..registry import LAYER_KINDS
from .base import Kept, LayerKind, SlicePlan, take
from .common import bind_blocks, check_indices, per_group

__all__ = ['NormKind', 'BatchNormKind', 'LayerNormKind', 'GroupNormKind', 'InstanceNormKind',
           'RMSNormKind']


class NormKind(LayerKind):
    """What the norms share: per-channel affine ``weight``/``bias``, one op per
    normalised element, channels bound to the input's on the channel dim.

    Subclasses set ``channel_attr`` (the attribute holding the width), ``channel_dim``
    (1 for NCHW norms, -1 for LayerNorm) and override :meth:`groups` where the
    statistics span several channels.  ``per_channel_statistics``: each channel is
    normalised by its own mean and variance, which divides out the scale of the weights
    that produced it (magnitude criteria read the norm's scale in their place).
    """
    axes = ('out', )
    trace_by_output = True
    channel_attr = 'num_features'
    channel_dim = 1
    per_channel_statistics = False

    def widths(self, module: nn.Module) -> Dict[str, int]:
        return {'out': getattr(module, self.channel_attr)}

    def groups(self, module: nn.Module) -> int:
        """Channels are bound across this many groups (GroupNorm's statistics)."""
        return 1

    def trace(self, ctx, node, ins, name, module):
        shape = ins[0].shape
        if shape is None:  # the model input (untracked, no shape): channels from outside
            dim, size = self.channel_dim, self.widths(module)['out']
        else:
            dim = self.channel_dim % len(shape)
            size = shape[dim]
        slots = ctx.channel_input(ins[0], dim, size, name, node)
        groups = self.groups(module)
        if 1 < groups < len(slots):
            bind_blocks(ctx, slots, groups, f'{name} normalises {groups} channel groups')
        ctx.use(name, 'norm', slots)
        return slots, dim

    def _affine(self, module: nn.Module, idx: Sequence[int], plan: SlicePlan) -> SlicePlan:
        """The affine tensors at ``idx``; one held as a buffer (FalconMamba's dummy RMSNorm
        ``weight``) is planned as a buffer, which :meth:`SlicePlan.apply` sets as such."""
        for attr in ('weight', 'bias'):
            tensor = getattr(module, attr, None)
            if tensor is not None:
                table = plan.buffers if attr in module._buffers else plan.params
                table[attr] = take(tensor, 0, idx)
        return plan

    def plan_slice(self, name: str, module: nn.Module,
                   kept: Dict[str, Sequence[int]]) -> SlicePlan:
        idx = check_indices(name, 'out', kept, self.widths(module)['out'])
        plan = SlicePlan(attrs={self.channel_attr: len(idx)})
        for attr in ('running_mean', 'running_var'):
            if getattr(module, attr, None) is not None:
                plan.buffers[attr] = take(getattr(module, attr), 0, idx)
        return self._affine(module, idx, plan)

    def channel_weights(self, module: nn.Module, axis: str) -> torch.Tensor:
        """The affine scale of each channel (ones without affine parameters): what a
        BN-scale criterion reads."""
        weight = getattr(module, 'weight', None)
        if weight is None:
            return torch.ones(self.widths(module)['out'], 1)
        return weight.detach().reshape(-1, 1)

    def params(self, module: nn.Module, kept: Kept) -> int:
        """Each affine parameter at the kept channels: a norm over several dims
        (``LayerNorm((5, 6))``) holds ``numel / width`` entries per channel.  A ``weight``
        held as a buffer (FalconMamba's weightless RMSNorm) is no parameter."""
        width, kept_out = self.widths(module)['out'], self.full(module, kept)['out']
        return sum(tensor.numel() // max(width, 1) * kept_out
                   for tensor in (module._parameters.get(attr) for attr in ('weight', 'bias'))
                   if tensor is not None)

    def flops(self, module: nn.Module, inputs: Tuple, output, kept: Kept) -> int:
        width = self.widths(module)['out']
        return output.numel() // max(width, 1) * self.full(module, kept)['out']


@LAYER_KINDS.register_module()
class BatchNormKind(NormKind):
    """BatchNorm1d/2d/3d and SyncBatchNorm: per-channel statistics, so a masked output
    is the sliced one.

    Example:
        >>> BatchNormKind().params(nn.BatchNorm2d(8), {'out': 3})
        6
    """
    module_types = (nn.modules.batchnorm._BatchNorm, )
    grad_fns = ('NativeBatchNormBackward0', 'CudnnBatchNormBackward0',
                'MiopenBatchNormBackward0')
    weight_attrs = ('weight', 'running_mean')
    per_channel_statistics = True


@LAYER_KINDS.register_module()
class InstanceNormKind(BatchNormKind):
    """InstanceNorm1d/2d/3d: per-sample, per-channel statistics; a masked output is the
    sliced one.  torch runs it as a batch norm over ``(1, N*C, ...)``: the merged dim
    repeats the channels' slots once per sample, and the module's channels are one
    repeat.

    Example:
        >>> InstanceNormKind().widths(nn.InstanceNorm2d(6, affine=True))
        {'out': 6}
    """
    module_types = (nn.modules.instancenorm._InstanceNorm, )
    weight_attrs = ('weight', )

    def trace(self, ctx, node, ins, name, module):
        if ins[0].shape is None:  # the model input, merged with its batch: left to the rules
            return None
        width, channels = ins[0].shape[1], module.num_features
        if width == channels:
            return super().trace(ctx, node, ins, name, module)
        tc = ins[0].channels
        if width % channels or tc is None or 1 not in tc.slots:
            return None
        repeats = tc.slots[1].reshape(width // channels, channels)
        if not (repeats == repeats[0]).all():
            return None
        ctx.use(name, 'norm', repeats[0])
        return tc.slots[1], 1


class _KeptStatistics(NormKind):
    """Norms whose statistics span channels: the masked output recomputes them over the
    kept channels only, as the sliced layer will.

    ``standard_type``'s own forward is recomputed with its functional op
    (:meth:`kept_output`).  A subclass's forward may add to it (guided-diffusion's
    ``GroupNorm32`` casts to float32, timm's ``LayerNormAct2d`` permutes and adds an
    activation), so it runs itself on a copy of the module sliced to the kept channels,
    and the masked output is the slim one by construction.  One whose forward takes more
    than its input that may be a tensor (a parameter without a default, or defaulting to
    None) is frozen: a tensor beside the input may carry the channels; flags a call
    passes (mmpretrain's ``LayerNorm2d(x, data_format='channel_last')``) are passed on.
    """
    standard_type: type = nn.Module

    def trace(self, ctx, node, ins, name, module):
        traced = super().trace(ctx, node, ins, name, module)
        extra = _extra_forward_parameters(type(module))
        if traced is not None and extra:
            ctx.freeze(traced[0], 'mixing', node,
                       f"{name} ({type(module).__name__})'s forward takes {', '.join(extra)} "
                       'beside its input, which may carry the channels its masked output, '
                       'recomputed over the kept ones, would not slice')
        return traced

    def masked_output(self, module: nn.Module, x: torch.Tensor, output: torch.Tensor,
                      keep: torch.Tensor, call=None) -> torch.Tensor:
        if bool(keep.all()):
            return output * keep
        reason = self.unsliceable(module)
        if reason is not None:
            raise ValueError(f'{type(module).__name__}: {reason}, so its masked output '
                             'cannot be computed over the kept channels')
        kept, dim = keep.flatten().bool(), -keep.dim()
        if self._own_forward(module):
            return self._sliced_forward(module, x, output, kept, dim, call)
        return self.kept_output(module, x, kept, dim)

    def _own_forward(self, module: nn.Module) -> bool:
        return type(module).forward is not self.standard_type.forward

    def _sliced_forward(self, module: nn.Module, x: torch.Tensor, output: torch.Tensor,
                        keep: torch.Tensor, dim: int, call=None) -> torch.Tensor:
        """The module's own forward (``call``: as it was called) on a copy sliced to the
        kept channels, run on the input's kept channels and put back at their positions
        (pruned ones 0)."""
        who = type(module).__name__
        if x.shape != output.shape:
            raise ValueError(f'{who}: its forward turns an input of shape {tuple(x.shape)} '
                             f'into {tuple(output.shape)}, so its masked output cannot be '
                             'computed over the kept channels of its input')
        index = keep.nonzero().flatten()
        sliced = self.plan_slice(who, module, {'out': index.tolist()}).applied_to_copy(module)
        run = call if call is not None else type(module).forward
        sliced_output = run(sliced, x.index_select(dim, index))
        return output.new_zeros(output.shape).index_copy(dim, index, sliced_output)

    def kept_output(self, module: nn.Module, x: torch.Tensor, keep: torch.Tensor,
                    dim: int) -> torch.Tensor:
        """``standard_type``'s output computed over the kept channels (pruned ones 0)."""
        raise NotImplementedError


@lru_cache(maxsize=None)
def _extra_forward_parameters(module_type: type) -> Tuple[str, ...]:
    """The names of the parameters of ``module_type.forward`` beside ``self`` and the
    input that may carry a tensor: one without a default, ``*args`` / ``**kwargs``, or
    one whose default is None (mamba's fused ``LayerNorm(x, residual=None)``) or another
    object.  A flag with a plain default (mmpretrain's ``data_format='channel_first'``) a
    call's arguments pass on as they are."""
    parameters = list(inspect.signature(module_type.forward).parameters.values())[2:]
    return tuple(p.name for p in parameters if not isinstance(p.default, (str, bool, int, float))
                 or p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD))


@LAYER_KINDS.register_module()
class LayerNormKind(_KeptStatistics):
    """LayerNorm over one dim (tokens, channels-last maps; a channels-first subclass such
    as timm's ``LayerNorm2d`` normalises dim 1).  Over several dims it mixes channels
    with them: the tracer freezes them.

    Example:
        >>> ln = nn.LayerNorm(4)
        >>> keep = torch.tensor([1., 0., 1., 1.])
        >>> x = torch.randn(2, 4)
        >>> out = LayerNormKind().masked_output(ln, x, ln(x), keep)
        >>> torch.allclose(out[:, [0, 2, 3]], F.layer_norm(x[:, [0, 2, 3]], (3, )))
        True
    """
    module_types = (nn.LayerNorm, )
    standard_type = nn.LayerNorm
    grad_fns = ('NativeLayerNormBackward0', )
    channel_dim = -1

    def widths(self, module: nn.Module) -> Dict[str, int]:
        return {'out': module.normalized_shape[-1]}

    def trace(self, ctx, node, ins, name, module):
        if len(module.normalized_shape) != 1:
            return None
        return super().trace(ctx, node, ins, name, module)

    def unsliceable(self, module: nn.Module) -> Optional[str]:
        if len(module.normalized_shape) != 1:
            return ('only a LayerNorm over one dim can be sliced, this one normalises over '
                    f'{tuple(module.normalized_shape)}')
        return None

    def plan_slice(self, name: str, module: nn.Module,
                   kept: Dict[str, Sequence[int]]) -> SlicePlan:
        idx = check_indices(name, 'out', kept, module.normalized_shape[0])
        return self._affine(module, idx, SlicePlan(attrs={'normalized_shape': (len(idx), )}))

    def kept_output(self, module, x, keep, dim):
        weight = module.weight[keep] if module.weight is not None else None
        bias = module.bias[keep] if module.bias is not None else None
        out = x.new_zeros(x.shape)
        kept = x.movedim(dim, -1)[..., keep]
        out.movedim(dim, -1)[..., keep] = F.layer_norm(kept, (kept.shape[-1], ), weight, bias,
                                                       module.eps)
        return out


@LAYER_KINDS.register_module()
class GroupNormKind(_KeptStatistics):
    """GroupNorm: channels are bound across the groups, so each group keeps the same
    positions and ``num_groups`` still divides the pruned width (with one channel per
    group, the groups follow the kept width).

    Example:
        >>> GroupNormKind().plan_slice('gn', nn.GroupNorm(2, 8), {'out': [0, 1, 4, 5]}).attrs
        {'num_channels': 4, 'num_groups': 2}
    """
    module_types = (nn.GroupNorm, )
    standard_type = nn.GroupNorm
    grad_fns = ('NativeGroupNormBackward0', )
    channel_attr = 'num_channels'

    def groups(self, module: nn.Module) -> int:
        return module.num_groups

    def plan_slice(self, name: str, module: nn.Module,
                   kept: Dict[str, Sequence[int]]) -> SlicePlan:
        idx = check_indices(name, 'out', kept, module.num_channels)
        groups = module.num_groups
        if groups == module.num_channels:
            groups = len(idx)
        elif groups > 1:
            per_group(name, 'output', idx, module.num_channels, groups)
        return self._affine(module, idx, SlicePlan(attrs={'num_channels': len(idx),
                                                          'num_groups': groups}))

    def kept_output(self, module, x, keep, dim):
        weight = module.weight[keep] if module.weight is not None else None
        bias = module.bias[keep] if module.bias is not None else None
        groups = module.num_groups if module.num_groups < module.num_channels else int(keep.sum())
        out = x.new_zeros(x.shape)
        out[:, keep] = F.group_norm(x[:, keep], groups, weight, bias, module.eps)
        return out


_UNKNOWN = object()


def _epsilon(module: nn.Module):
    """An RMSNorm's ``eps`` (transformers: ``variance_epsilon`` or ``eps``; None for
    ``nn.RMSNorm``'s default), or ``_UNKNOWN`` for a class that keeps it elsewhere: its
    masked output could not be exact, so the tracer walks its ops instead."""
    for attr in ('variance_epsilon', 'eps'):
        if hasattr(module, attr):
            return getattr(module, attr)
    return _UNKNOWN


@LAYER_KINDS.register_module()
class RMSNormKind(NormKind):
    """RMSNorm over the last dim: torch's ``nn.RMSNorm`` and the transformers classes
    named ``*RMSNorm`` (``LlamaRMSNorm``, ``Qwen2RMSNorm``, ``GemmaRMSNorm``, ... whose
    ``weight`` scales ``x * rsqrt(mean(x ** 2) + eps)``).

    Their forwards are plain ops, so the tracer takes each call as one op
    (``traced_as_module``).  The masked output rescales the module's own output by
    ``rms(all channels) / rms(kept channels)``, which is exact for any variant that
    multiplies ``x`` by the inverse RMS and a per-channel scale (``weight`` or
    ``1 + weight``).  A call whose last dim carries no channels (Qwen3's norm of each
    head's ``head_dim``), or of a class that keeps its epsilon under another name, is
    left to the op-by-op walk.

    Example:
        >>> norm = nn.RMSNorm(4, eps=1e-6)
        >>> keep = torch.tensor([1., 0., 1., 1.])
        >>> x = torch.randn(2, 4) * keep
        >>> out = RMSNormKind().masked_output(norm, x, norm(x), keep)
        >>> torch.allclose(out[:, [0, 2, 3]], nn.RMSNorm(3, eps=1e-6)(x[:, [0, 2, 3]]))
        True
    """
    module_types = (nn.RMSNorm, )
    traced_as_module = True
    channel_dim = -1

    @classmethod
    def claims(cls, module_type: type) -> bool:
        return module_type.__name__.endswith('RMSNorm') and \
            module_type.__module__.startswith('transformers.')

    def covers(self, module: nn.Module) -> bool:
        """An RMSNorm that says its width, by a ``weight`` or a ``normalized_shape``.
        transformers' weightless ones (NanoChat's, Gemma 3n's ``with_scale=False``) hold
        neither, so no mask could be sized for them: they have no kind, and their ops are
        walked and counted one by one.  The walk rightly freezes the channels through
        them: its ``mean(x ** 2)`` would average the masked zeros over the full width,
        where the slim norm averages over the kept ones (this kind's rescale would make
        the two agree, but needs the width)."""
        weight = getattr(module, 'weight', None)
        return (isinstance(weight, torch.Tensor) and weight.dim() > 0) or \
            hasattr(module, 'normalized_shape')

    def widths(self, module: nn.Module) -> Dict[str, int]:
        """The last dim normalised (``weight``'s last dim for a transformers class)."""
        shape = getattr(module, 'normalized_shape', None)
        return {'out': shape[-1] if shape is not None else module.weight.shape[-1]}

    def trace(self, ctx, node, ins, name, module):
        tc = ins[0].channels
        if tc is None or tc.ndim == 0 or tc.ndim - 1 not in tc.slots or \
                _epsilon(module) is _UNKNOWN or self.unsliceable(module) is not None:
            return None
        return super().trace(ctx, node, ins, name, module)

    def unsliceable(self, module: nn.Module) -> Optional[str]:
        shape = getattr(module, 'normalized_shape', (None, ))
        if len(shape) != 1:
            return ('only an RMSNorm over one dim can be sliced, this one normalises over '
                    f'{tuple(shape)}')
        return None

    def plan_slice(self, name: str, module: nn.Module,
                   kept: Dict[str, Sequence[int]]) -> SlicePlan:
        idx = check_indices(name, 'out', kept, self.widths(module)['out'])
        attrs = {'normalized_shape': (len(idx), )} if hasattr(module, 'normalized_shape') \
            else {}
        return self._affine(module, idx, SlicePlan(attrs=attrs))

    def masked_output(self, module: nn.Module, x: torch.Tensor, output: torch.Tensor,
                      keep: torch.Tensor, call=None) -> torch.Tensor:
        if bool(keep.all()):
            return output * keep
        eps = _epsilon(module)
        if eps is None or eps is _UNKNOWN:  # nn.RMSNorm's default
            eps = torch.finfo(x.dtype).eps
        dim = -keep.dim()
        # at least float32 (a half input's squares overflow), float64 kept as it is
        exact = torch.promote_types(x.dtype, torch.float32)
        squares = x.to(exact).movedim(dim, -1).pow(2)
        full = squares.mean(-1, keepdim=True)
        kept = squares[..., keep.flatten().bool()].mean(-1, keepdim=True)
        scale = ((full + eps) / (kept + eps)).sqrt().movedim(-1, dim)
        return (output.to(exact) * scale).to(output.dtype) * keep
