"""FLOPs and parameter counts that know masked supernets and slimmed subnets.

FLOPs here are multiply-accumulates of conv, transposed conv and linear layers plus one
operation per normalised element, the convention of OpenMMLab's counters.  A masked
module counts the channels its ``in_mask``/``out_mask`` keep, so a supernet set to a
subnet reports what the sliced subnet will cost.
"""
from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch
import torch.nn as nn

from ..tracing.forward import call_model, default_example_inputs


def _kept(module: nn.Module, mask: str, full: int) -> int:
    buffer = module._buffers.get(mask)
    return int(buffer.count_nonzero()) if buffer is not None else full


def _io(module: nn.Module):
    """(kept input channels, kept output channels) of a conv/linear."""
    if isinstance(module, nn.Linear):
        return (_kept(module, 'in_mask', module.in_features),
                _kept(module, 'out_mask', module.out_features))
    return (_kept(module, 'in_mask', module.in_channels),
            _kept(module, 'out_mask', module.out_channels))


def _inputs_per_group(module: nn.modules.conv._ConvNd, kept_in: int) -> float:
    if module.groups == module.in_channels:  # depthwise: one input per group
        return 1
    return kept_in / module.groups


def conv_params(module: nn.modules.conv._ConvNd) -> int:
    kept_in, kept_out = _io(module)
    kernel = int(torch.tensor(module.kernel_size).prod())
    per_out = _inputs_per_group(module, kept_in) * kernel
    bias = kept_out if module.bias is not None else 0
    return int(round(kept_out * per_out)) + bias


def conv_flops(module: nn.modules.conv._ConvNd, x: torch.Tensor, output: torch.Tensor) -> int:
    kept_in, kept_out = _io(module)
    kernel = int(torch.tensor(module.kernel_size).prod())
    if module.transposed:  # each input position scatters into (out / groups) * k outputs
        positions = x.shape[0] * int(torch.tensor(x.shape[2:]).prod())
        depthwise = module.groups == module.in_channels
        per_input = kept_out / kept_in if depthwise else kept_out / module.groups
        return int(round(positions * kept_in * per_input * kernel))
    positions = output.shape[0] * int(torch.tensor(output.shape[2:]).prod())
    return int(round(positions * kept_out * _inputs_per_group(module, kept_in) * kernel))


def linear_params(module: nn.Linear) -> int:
    kept_in, kept_out = _io(module)
    return kept_in * kept_out + (kept_out if module.bias is not None else 0)


def linear_flops(module: nn.Linear, x: torch.Tensor, output: torch.Tensor) -> int:
    kept_in, kept_out = _io(module)
    return (output.numel() // module.out_features) * kept_in * kept_out


def _norm_channels(module: nn.Module) -> int:
    if isinstance(module, nn.LayerNorm):
        return module.normalized_shape[-1]
    return getattr(module, 'num_features', getattr(module, 'num_channels', 0))


def norm_params(module: nn.Module) -> int:
    kept = _kept(module, 'out_mask', _norm_channels(module))
    affine = sum(1 for name in ('weight', 'bias') if getattr(module, name, None) is not None)
    return kept * affine


def norm_flops(module: nn.Module, x: torch.Tensor, output: torch.Tensor) -> int:
    channels = _norm_channels(module)
    return output.numel() // max(channels, 1) * _kept(module, 'out_mask', channels)


_COUNTERS = [
    (nn.modules.conv._ConvNd, conv_params, conv_flops),
    (nn.Linear, linear_params, linear_flops),
    ((nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm), norm_params, norm_flops),
]


def _counter(module: nn.Module):
    for kind, params, flops in _COUNTERS:
        if isinstance(module, kind):
            return params, flops
    return None


@dataclass
class Complexity:
    """FLOPs (multiply-accumulates) and parameters of a model, in absolute numbers."""
    flops: int
    params: int

    def __str__(self) -> str:
        return f'FLOPs {human(self.flops)}, params {human(self.params)}'


def human(value: float) -> str:
    """``1234567`` -> ``'1.23M'``."""
    for unit, scale in (('G', 1e9), ('M', 1e6), ('k', 1e3)):
        if abs(value) >= scale:
            return f'{value / scale:.2f}{unit}'
    return f'{value:.0f}'


def count_params(model: nn.Module) -> int:
    """Parameters, with masked conv/linear/norm layers counted at their kept width."""
    total, counted = 0, set()
    for module in model.modules():
        found = _counter(module)
        if found is not None:
            total += found[0](module)
            counted.update(id(p) for p in module.parameters(recurse=False))
    return total + sum(p.numel() for p in model.parameters() if id(p) not in counted)


def get_model_complexity(model: nn.Module, example_inputs: Any = None,
                         per_module: Optional[Dict[str, int]] = None) -> Complexity:
    """Count FLOPs with one forward (eval mode, no grad) and parameters.

    Args:
        model: a dense, masked or slimmed model.
        example_inputs: tensor, tuple or dict for the forward; default 1x3x224x224.
        per_module: if given, filled with the FLOPs of each counted module.

    Example:
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Flatten(), nn.Linear(8 * 16, 2))
        >>> c = get_model_complexity(net, torch.randn(1, 3, 4, 4))
        >>> c.flops == 16 * 8 * 3 * 9 + 128 * 2
        True
    """
    if example_inputs is None:
        example_inputs = default_example_inputs(model)
    flops: Dict[str, int] = {}
    handles = []
    for name, module in model.named_modules():
        found = _counter(module)
        if found is not None:
            def hook(mod, args, output, name=name, count=found[1]):
                flops[name] = flops.get(name, 0) + count(mod, args[0], output)
            handles.append(module.register_forward_hook(hook))
    training = model.training
    try:
        model.eval()
        with torch.no_grad():
            call_model(model, example_inputs)
    finally:
        model.train(training)
        for handle in handles:
            handle.remove()
    if per_module is not None:
        per_module.update(flops)
    return Complexity(sum(flops.values()), count_params(model))
