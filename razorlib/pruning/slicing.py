"""Physical slicing of modules by kept channel indices: one planner per module kind.

A planner reads a module and its kept channels and returns the new tensors and
attributes without touching the module; :func:`slim_model` plans every module first and
applies the plans only when all of them succeeded, so a bad channel config never leaves
a half-pruned model behind.
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from .channel_config import ChannelConfig, ChannelSelection, as_channel_config
from .masks import remove_masks


@dataclass
class SlicePlan:
    """New parameters, buffers and attributes for one module."""
    params: Dict[str, torch.Tensor] = field(default_factory=dict)
    buffers: Dict[str, torch.Tensor] = field(default_factory=dict)
    attrs: Dict[str, Any] = field(default_factory=dict)

    def apply(self, module: nn.Module) -> None:
        for attr, tensor in self.params.items():
            old = module._parameters[attr]
            module._parameters[attr] = nn.Parameter(tensor.contiguous(),
                                                    requires_grad=old.requires_grad)
        for attr, tensor in self.buffers.items():
            module._buffers[attr] = tensor.contiguous()
        for attr, value in self.attrs.items():
            setattr(module, attr, value)


def _indices(name: str, axis: str, sel: Optional[ChannelSelection], size: int) -> List[int]:
    if sel is None:
        return list(range(size))
    if sel.raw != size:
        raise ValueError(f'{name}: the channel config expects {sel.raw} {axis} channels, '
                         f'the module has {size}')
    return list(sel.index)


def _per_group(name: str, axis: str, index: Sequence[int], size: int, groups: int) -> List[int]:
    """The in-group positions kept, which must be the same in every group."""
    per = size // groups
    kept = [[i % per for i in index if i // per == g] for g in range(groups)]
    if any(k != kept[0] for k in kept):
        raise ValueError(f'{name} is a group conv/norm with {groups} groups: its kept {axis} '
                         'channels must be the same positions in every group')
    return kept[0]


def take(tensor: torch.Tensor, dim: int, index: Sequence[int]) -> torch.Tensor:
    """``tensor`` restricted to ``index`` along ``dim``.

    Keeping everything returns ``tensor`` itself; a ``meta`` tensor only changes shape
    (how ``verify`` slices its shape-only copy cheaply).
    """
    if list(index) == list(range(tensor.shape[dim])):
        return tensor
    if tensor.is_meta:
        shape = list(tensor.shape)
        shape[dim] = len(index)
        return tensor.new_empty(shape)
    return tensor.index_select(dim, torch.as_tensor(index, device=tensor.device))


def plan_conv(name: str, conv: nn.modules.conv._ConvNd,
              axes: Dict[str, ChannelSelection]) -> SlicePlan:
    """Conv1d/2d/3d and ConvTranspose1d/2d/3d, including depthwise and group convs."""
    in_c, out_c, groups = conv.in_channels, conv.out_channels, conv.groups
    in_idx = _indices(name, 'input', axes.get('in'), in_c)
    out_idx = _indices(name, 'output', axes.get('out'), out_c)
    weight = conv.weight
    rows, cols = (in_idx, out_idx) if conv.transposed else (out_idx, in_idx)
    if groups == 1:
        new_groups = 1
        weight = take(take(weight, 0, rows), 1, cols)
    elif groups == in_c:
        mult = out_c // in_c
        expected = [i * mult + j for i in in_idx for j in range(mult)]
        if out_idx != expected:
            raise ValueError(f'{name} is a depthwise conv: it must keep the {mult} output '
                             'channel(s) of every kept input channel and no others')
        new_groups = len(in_idx)
        weight = take(weight, 0, in_idx if conv.transposed else out_idx)
    else:
        new_groups = groups
        in_local = _per_group(name, 'input', in_idx, in_c, groups)
        out_local = _per_group(name, 'output', out_idx, out_c, groups)
        weight = take(take(weight, 0, rows), 1, out_local if conv.transposed else in_local)
    plan = SlicePlan(params={'weight': weight},
                     attrs={'in_channels': len(in_idx), 'out_channels': len(out_idx),
                            'groups': new_groups})
    if conv.bias is not None:
        plan.params['bias'] = take(conv.bias, 0, out_idx)
    return plan


def plan_linear(name: str, linear: nn.Linear, axes: Dict[str, ChannelSelection]) -> SlicePlan:
    in_idx = _indices(name, 'input', axes.get('in'), linear.in_features)
    out_idx = _indices(name, 'output', axes.get('out'), linear.out_features)
    plan = SlicePlan(params={'weight': take(take(linear.weight, 0, out_idx), 1, in_idx)},
                     attrs={'in_features': len(in_idx), 'out_features': len(out_idx)})
    if linear.bias is not None:
        plan.params['bias'] = take(linear.bias, 0, out_idx)
    return plan


def _affine(module: nn.Module, idx: List[int], plan: SlicePlan) -> SlicePlan:
    for attr in ('weight', 'bias'):
        if getattr(module, attr, None) is not None:
            plan.params[attr] = take(getattr(module, attr), 0, idx)
    return plan


def plan_batch_norm(name: str, bn: nn.modules.batchnorm._BatchNorm,
                    axes: Dict[str, ChannelSelection]) -> SlicePlan:
    idx = _indices(name, 'output', axes.get('out'), bn.num_features)
    plan = SlicePlan(attrs={'num_features': len(idx)})
    for attr in ('running_mean', 'running_var'):
        if getattr(bn, attr, None) is not None:
            plan.buffers[attr] = take(getattr(bn, attr), 0, idx)
    return _affine(bn, idx, plan)


def plan_layer_norm(name: str, ln: nn.LayerNorm, axes: Dict[str, ChannelSelection]) -> SlicePlan:
    if len(ln.normalized_shape) != 1:
        raise ValueError(f'{name}: only a LayerNorm over one dim can be sliced, this one '
                         f'normalises over {tuple(ln.normalized_shape)}')
    idx = _indices(name, 'output', axes.get('out'), ln.normalized_shape[0])
    return _affine(ln, idx, SlicePlan(attrs={'normalized_shape': (len(idx), )}))


def plan_group_norm(name: str, gn: nn.GroupNorm, axes: Dict[str, ChannelSelection]) -> SlicePlan:
    idx = _indices(name, 'output', axes.get('out'), gn.num_channels)
    groups = gn.num_groups
    if groups == gn.num_channels:
        groups = len(idx)
    elif groups > 1:
        _per_group(name, 'output', idx, gn.num_channels, groups)
    return _affine(gn, idx, SlicePlan(attrs={'num_channels': len(idx), 'num_groups': groups}))


def plan_embedding(name: str, emb: nn.Embedding, axes: Dict[str, ChannelSelection]) -> SlicePlan:
    idx = _indices(name, 'output', axes.get('out'), emb.embedding_dim)
    return SlicePlan(params={'weight': take(emb.weight, 1, idx)}, attrs={'embedding_dim': len(idx)})


#: module kind -> (planner, the channel axes it slices); first isinstance match wins.
SLICERS: List[Tuple[type, Callable, Tuple[str, ...]]] = [
    (nn.modules.conv._ConvNd, plan_conv, ('in', 'out')),
    (nn.Linear, plan_linear, ('in', 'out')),
    (nn.modules.batchnorm._BatchNorm, plan_batch_norm, ('out', )),
    (nn.LayerNorm, plan_layer_norm, ('out', )),
    (nn.GroupNorm, plan_group_norm, ('out', )),
    (nn.Embedding, plan_embedding, ('out', )),
]


def slicer_for(module: nn.Module) -> Optional[Tuple[Callable, Tuple[str, ...]]]:
    for kind, planner, axes in SLICERS:
        if isinstance(module, kind):
            return planner, axes
    return None


def plan_module(name: str, module: nn.Module, axes: Dict[str, ChannelSelection]) -> SlicePlan:
    found = slicer_for(module)
    if found is None:
        raise ValueError(f'{name}: razorlib cannot slice a {type(module).__name__}')
    planner, allowed = found
    extra = set(axes) - set(allowed)
    if extra:
        raise ValueError(f'{name}: a {type(module).__name__} has no {sorted(extra)} channel '
                         f'axis to slice (it has {list(allowed)})')
    return planner(name, module, axes)


def _plan_param(name: str, owner: nn.Module, attr: str,
                dims: Dict[int, ChannelSelection]) -> SlicePlan:
    tensor = getattr(owner, attr)
    for dim, sel in sorted(dims.items()):
        if not 0 <= dim < tensor.dim():
            raise ValueError(f'params.{name}: dim {dim} out of range for shape '
                             f'{tuple(tensor.shape)}')
        idx = _indices(name, f'dim-{dim}', sel, tensor.shape[dim])
        tensor = take(tensor, dim, idx)
    if attr in owner._parameters:
        return SlicePlan(params={attr: tensor})
    return SlicePlan(buffers={attr: tensor})


def plan_slices(model: nn.Module, channel_cfg: ChannelConfig) -> List[Tuple[nn.Module, SlicePlan]]:
    """A plan for every module and parameter ``channel_cfg`` names, touching nothing.

    Raises:
        ValueError: naming the module or parameter at fault (unknown name, wrong channel
            count, a depthwise or group conv the selection would break).
    """
    modules = dict(model.named_modules())
    plans: List[Tuple[nn.Module, SlicePlan]] = []
    with torch.no_grad():
        for name, axes in channel_cfg.modules.items():
            if name not in modules:
                raise ValueError(f'channel config names module {name!r}, which the model '
                                 'does not have')
            plans.append((modules[name], plan_module(name, modules[name], axes)))
        for name, dims in channel_cfg.params.items():
            owner_name, _, attr = name.rpartition('.')
            owner = modules.get(owner_name)
            if owner is None or not isinstance(getattr(owner, attr, None), torch.Tensor):
                raise ValueError(f'channel config names parameter {name!r}, which the model '
                                 'does not have')
            plans.append((owner, _plan_param(name, owner, attr, dims)))
    return plans


def slim_model(model: nn.Module,
               channel_cfg: Union[ChannelConfig, Dict[str, Any], str, Path]) -> nn.Module:
    """Physically slice ``model`` (in place) to the channels ``channel_cfg`` keeps.

    Masks from a pruner are removed first.  Every module is planned before any is
    changed: an error (unknown module, wrong channel count, a depthwise or group conv
    that would break) leaves the model untouched.

    Example:
        >>> import torch.nn as nn
        >>> from razorlib.pruning import ChannelConfig, ChannelSelection
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 4, 3))
        >>> cfg = ChannelConfig({'0': {'out': ChannelSelection(8, (1, 4))},
        ...                      '1': {'in': ChannelSelection(8, (1, 4))}})
        >>> slim_model(net, cfg)[1].in_channels
        2
    """
    plans = plan_slices(model, as_channel_config(channel_cfg))
    remove_masks(model)
    for module, plan in plans:
        plan.apply(module)
    return model
