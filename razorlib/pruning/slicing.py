"""Physical slicing of modules by kept channel indices, planned by their layer kinds.

A module's :class:`~razorlib.layers.LayerKind` reads it and its kept channels and returns
the new tensors and attributes without touching it (``plan_slice``); :func:`slim_model`
plans every module first and applies the plans only when all of them succeeded, so a bad
channel config never leaves a half-pruned model behind.
"""
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn

from ..layers import (HeadAttributes, KindTable, LayerKindsArg, SlicePlan, as_table,
                      head_attributes_of, plan_param)
from .channel_config import ChannelConfig, ChannelSelection, as_channel_config
from .masks import remove_masks


def _indices(name: str, axis: str, sel: Optional[ChannelSelection], size: int) -> List[int]:
    if sel is None:
        return list(range(size))
    if sel.raw != size:
        raise ValueError(f'{name}: the channel config expects {sel.raw} {axis} channels, '
                         f'the module has {size}')
    return list(sel.index)


def plan_module(name: str, module: nn.Module, axes: Dict[str, ChannelSelection],
                kinds: Optional[KindTable] = None) -> SlicePlan:
    """The slice plan of one module, by its layer kind.

    Raises:
        ValueError: the module has no layer kind, no such axis, or another width.
    """
    kind = as_table(kinds).kind_of(module)
    if kind is None:
        raise ValueError(f'{name}: razorlib cannot slice a {type(module).__name__} (no layer '
                         'kind covers it; see docs/layer_kinds.md)')
    why = kind.unsliceable(module)
    if why is not None:
        raise ValueError(f'{name}: {why}')
    extra = set(axes) - set(kind.axes)
    if extra:
        raise ValueError(f'{name}: a {type(module).__name__} has no {sorted(extra)} channel '
                         f'axis to slice (it has {list(kind.axes)})')
    widths = kind.widths(module)
    kept = {axis: _indices(name, 'input' if axis == 'in' else 'output', sel, widths[axis])
            for axis, sel in axes.items()}
    return kind.plan_slice(name, module, kept)


def _plan_param(name: str, owner: nn.Module, attr: str,
                dims: Dict[int, ChannelSelection]) -> SlicePlan:
    tensor = getattr(owner, attr)
    kept = {}
    for dim, sel in sorted(dims.items()):
        if not 0 <= dim < tensor.dim():
            raise ValueError(f'params.{name}: dim {dim} out of range for shape '
                             f'{tuple(tensor.shape)}')
        kept[dim] = _indices(name, f'dim-{dim}', sel, tensor.shape[dim])
    tensor = plan_param(tensor, kept)
    if attr in owner._parameters:
        return SlicePlan(params={attr: tensor})
    return SlicePlan(buffers={attr: tensor})


def plan_slices(model: nn.Module, channel_cfg: ChannelConfig,
                kinds: Optional[KindTable] = None) -> List[Tuple[nn.Module, SlicePlan]]:
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
            plans.append((modules[name], plan_module(name, modules[name], axes, kinds)))
        for name, dims in channel_cfg.params.items():
            owner_name, _, attr = name.rpartition('.')
            owner = modules.get(owner_name)
            if owner is None or not isinstance(getattr(owner, attr, None), torch.Tensor):
                raise ValueError(f'channel config names parameter {name!r}, which the model '
                                 'does not have')
            plans.append((owner, _plan_param(name, owner, attr, dims)))
    plans += _head_plans(model, channel_cfg, kinds)
    return plans


class _HeadsPlan:
    """Recomputes an attention module's head attributes once its projections are sliced
    (applied after them: it reads their new widths).  ``head_dim`` is the dense head
    width, read before slicing.  ``width`` holds the dense head count and attributes
    where every head keeps the same positions (``head_dim`` narrows, the counts stay);
    otherwise whole heads went and the counts follow."""

    def __init__(self, spec: HeadAttributes, kinds: Optional[KindTable], head_dim: int,
                 width: Optional[Tuple[int, Dict[str, int]]] = None):
        self.spec, self.kinds, self.head_dim, self.width = spec, kinds, head_dim, width

    def apply(self, module: nn.Module) -> None:
        if self.width is None:
            self.spec.update(module, self.kinds, self.head_dim)
        else:
            self.spec.update_width(module, *self.width, self.kinds)


def _narrows_heads(name: str, head_dim: int, kept: ChannelSelection) -> bool:
    """Whether ``kept`` (the query projection's output channels) keeps the same positions
    of every head of ``head_dim`` rather than whole heads.

    Raises:
        ValueError: naming the projection, when it is neither.
    """
    if kept.raw % head_dim:
        return False
    rows = np.zeros(kept.raw, dtype=bool)
    rows[list(kept.index)] = True
    rows = rows.reshape(-1, head_dim)
    if (rows.all(1) | ~rows.any(1)).all():
        return False  # whole heads
    if (rows == rows[0]).all():
        return True
    raise ValueError(f'{name}: the kept channels are neither whole heads of {head_dim} nor '
                     'the same positions in every head')


def _head_plans(model: nn.Module, channel_cfg: ChannelConfig,
                kinds: Optional[KindTable]) -> List[Tuple[nn.Module, _HeadsPlan]]:
    """A plan for each attention module whose query projection the config slices."""
    plans = []
    for name, module in model.named_modules():
        spec = head_attributes_of(module)
        if spec is None:
            continue
        query = f'{name}.{spec.query}' if name else spec.query
        kept = channel_cfg.modules.get(query, {}).get('out')
        if kept is None:
            continue
        head_dim = spec.head_width(module, kinds)
        width = None
        if _narrows_heads(query, head_dim, kept):
            width = (spec.head_count(module, kinds), spec.attributes(module))
        plans.append((module, _HeadsPlan(spec, kinds, head_dim, width)))
    return plans


def slim_model(model: nn.Module, channel_cfg: Union[ChannelConfig, Dict[str, Any], str, Path],
               layer_kinds: LayerKindsArg = None) -> nn.Module:
    """Physically slice ``model`` (in place) to the channels ``channel_cfg`` keeps; returns
    ``model`` (an in-place function returns its argument, so calls chain).

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
    plans = plan_slices(model, as_channel_config(channel_cfg), as_table(layer_kinds))
    ties = _ties(model, plans)
    remove_masks(model)
    for module, plan in plans:
        plan.apply(module)
    for owners in ties:  # each owner got a new Parameter: share the first one again
        first = owners[0][0]._parameters[owners[0][1]]
        for module, attr in owners[1:]:
            module._parameters[attr] = first
    return model


def _ties(model: nn.Module, plans: List[Tuple[nn.Module, Any]]
          ) -> List[List[Tuple[nn.Module, str]]]:
    """The ``(module, attribute)`` owners of each parameter several modules hold, checked
    to be sliced alike (an embedding tied to ``lm_head``, both cut on the hidden size).

    Raises:
        ValueError: naming two owners of one tensor that the plans slice differently.
    """
    owners: Dict[int, List[Tuple[str, nn.Module, str]]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        for attr, param in module._parameters.items():
            if param is not None:
                owners.setdefault(id(param), []).append((name, module, attr))
    planned = {(id(module), attr): tensor for module, plan in plans
               for attr, tensor in getattr(plan, 'params', {}).items()}
    ties = []
    for tied in owners.values():
        distinct = list({id(m): (n, m, a) for n, m, a in tied}.values())
        if len(distinct) < 2:
            continue
        tensors = [planned.get((id(m), a), m._parameters[a]) for _, m, a in distinct]
        shapes = [tuple(t.shape) for t in tensors]
        if len(set(shapes)) > 1 or not all(t.is_meta or torch.equal(t, tensors[0])
                                           for t in tensors[1:]):
            described = ', '.join(f'{n or "<model>"}.{a} {s}' for (n, _, a), s in
                                  zip(distinct, shapes))
            whole = [n or '<model>' for n, m, a in distinct if (id(m), a) not in planned]
            left = f' (the channel config leaves {", ".join(whole)} whole)' if whole else ''
            raise ValueError(f'tied parameters would be sliced apart: {described}{left}; '
                             'prune them in one group or untie them first')
        if any((id(m), a) in planned for _, m, a in distinct):
            ties.append([(m, a) for _, m, a in distinct])
    return ties
