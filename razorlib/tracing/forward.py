"""One forward pass that records the autograd graph and which module produced what.

The forward runs through ``torch.func.functional_call`` on *shadow* parameters and
buffers: by default on the ``meta`` device (shapes only, no arithmetic, so tracing a
ResNet-152 costs no convolutions), and, if the model's code needs real values (``.item()``,
data-dependent control flow), again on detached aliases of the real tensors.  Either way
the model's own tensors, ``requires_grad`` flags, modes and attributes are never changed:
the session snapshots every module's ``__dict__`` and puts it back.
"""
import contextlib
import copy
import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import torch
import torch.nn as nn
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode

_NORM_STAT_BUFFERS = ('running_mean', 'running_var')


def default_example_inputs(model: nn.Module) -> torch.Tensor:
    """A random 1x3x224x224 image on the model's device, as mmrazor used."""
    param = next(model.parameters(), None)
    device = param.device if param is not None else 'cpu'
    return torch.randn(1, 3, 224, 224, device=device)


def call_model(model: nn.Module, example_inputs: Any) -> Any:
    """Call ``model`` with a tensor, a tuple/list of positional args or a dict of kwargs."""
    if isinstance(example_inputs, dict):
        return model(**example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return model(*example_inputs)
    return model(example_inputs)


def flatten_tensors(obj: Any) -> List[torch.Tensor]:
    """Every tensor in a nested dict/list/tuple, in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in flatten_tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in flatten_tensors(v)]
    return []


def to_meta(obj: Any) -> Any:
    """Tensors in a nested dict/list/tuple moved to the ``meta`` device."""
    if isinstance(obj, torch.Tensor):
        return obj.to('meta')
    if isinstance(obj, dict):
        return {k: to_meta(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_meta(v) for v in obj)
    return obj


def _batch_norm(x, *args, **kwargs):
    channels = x.shape[1]
    return torch.empty_like(x), x.new_empty(channels), x.new_empty(channels)


def _layer_norm(x, normalized_shape, *args, **kwargs):
    stats = x.shape[:x.dim() - len(normalized_shape)] + (1, ) * len(normalized_shape)
    return torch.empty_like(x), x.new_empty(stats), x.new_empty(stats)


def _group_norm(x, weight, bias, n, c, hxw, group, eps):
    return torch.empty_like(x), x.new_empty((n, group)), x.new_empty((n, group))


class FastMetaNorms(TorchDispatchMode):
    """Shape-only norms on the ``meta`` device.

    torch's meta kernels for batch/layer/group norm are Python decompositions that cost
    ~1 ms each, most of a meta forward; shapes are all tracing needs.  The mode sits below
    autograd, so the grad_fn nodes (``NativeBatchNormBackward0``...) are recorded as usual.
    """

    _FAST = {
        torch.ops.aten.native_batch_norm.default: _batch_norm,
        torch.ops.aten.native_layer_norm.default: _layer_norm,
        torch.ops.aten.native_group_norm.default: _group_norm,
    }

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        fast = self._FAST.get(func)
        if fast is not None and args[0].device.type == 'meta':
            return fast(*args, **kwargs)
        return func(*args, **kwargs)


@dataclass
class ForwardRecord:
    """What one traced forward left behind.

    Args:
        outputs: the output tensors that depend on parameters.
        node_modules: grad_fn node -> names of the modules whose forward returned it.
        module_outputs: ``(node, output_nr, module name)`` of every module call.
        calls: module name -> number of calls.
        owners: ``id`` of each shadow tensor -> ``(module name, attribute)``.
        device: ``'meta'`` or ``'real'``: how the forward ran.
    """
    outputs: List[torch.Tensor]
    node_modules: Dict[Any, List[str]] = field(default_factory=lambda: defaultdict(list))
    module_outputs: List[Tuple[Any, int, str]] = field(default_factory=list)
    calls: Dict[str, int] = field(default_factory=lambda: defaultdict(int))
    owners: Dict[int, Tuple[str, str]] = field(default_factory=dict)
    device: str = 'meta'
    shadows: Dict[str, torch.Tensor] = field(default_factory=dict, repr=False)


def _shadows(model: nn.Module, meta: bool) -> Dict[str, torch.Tensor]:
    """Stand-ins for every parameter and buffer, tied ones kept tied.

    Float tensors (but norm running statistics) require grad, so frozen layers and
    buffer arithmetic appear in the autograd graph.
    """
    shadows: Dict[str, torch.Tensor] = {}
    made: Dict[int, torch.Tensor] = {}
    named = itertools.chain(model.named_parameters(remove_duplicate=False),
                            model.named_buffers(remove_duplicate=False))
    for name, tensor in named:
        if id(tensor) not in made:
            shadow = torch.empty_like(tensor, device='meta') if meta else tensor.detach()
            if tensor.is_floating_point() and name.rpartition('.')[2] not in _NORM_STAT_BUFFERS:
                shadow.requires_grad_(True)
            made[id(tensor)] = shadow
        shadows[name] = made[id(tensor)]
    return shadows


_CONTAINERS = (dict, list, set)


def _snapshot(module: nn.Module) -> Dict[str, Tuple[Any, Any]]:
    """Each attribute with a copy of its contents if it is a plain dict/list/set (a cache
    that forward fills in place)."""
    return {key: (value, copy.copy(value) if type(value) in _CONTAINERS else None)
            for key, value in vars(module).items()}


def _restore(module: nn.Module, attrs: Dict[str, Tuple[Any, Any]]) -> None:
    for key in [k for k in vars(module) if k not in attrs]:
        delattr(module, key)
    for key, (value, contents) in attrs.items():
        if isinstance(value, list):
            value[:] = contents
        elif contents is not None:
            value.clear()
            value.update(contents)
        vars(module)[key] = value


def _run(model: nn.Module, example_inputs: Any, meta: bool) -> ForwardRecord:
    shadows = _shadows(model, meta)
    record = ForwardRecord([], device='meta' if meta else 'real', shadows=shadows)
    for name, tensor in shadows.items():
        owner, _, attr = name.rpartition('.')
        record.owners.setdefault(id(tensor), (owner, attr))

    def hook_for(name: str):
        def hook(module, args, output):
            record.calls[name] += 1
            for tensor in flatten_tensors(output):
                if tensor.grad_fn is not None:
                    record.node_modules[tensor.grad_fn].append(name)
                    record.module_outputs.append((tensor.grad_fn, tensor.output_nr, name))
        return hook

    snapshot = {m: _snapshot(m) for m in model.modules()}
    handles = [m.register_forward_hook(hook_for(name)) for name, m in model.named_modules()]
    try:
        model.eval()
        inputs = to_meta(example_inputs) if meta else example_inputs
        if isinstance(inputs, dict):
            args, kwargs = (), inputs
        else:
            args, kwargs = (tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs, )), {}
        with torch.enable_grad(), (FastMetaNorms() if meta else contextlib.nullcontext()):
            outputs = functional_call(model, shadows, args, kwargs, strict=False)
    finally:
        for handle in handles:
            handle.remove()
        for module, attrs in snapshot.items():
            _restore(module, attrs)
    record.outputs = [t for t in flatten_tensors(outputs)
                      if t.requires_grad and t.is_floating_point()]
    return record


def record_forward(model: nn.Module, example_inputs: Any, meta: bool = True) -> ForwardRecord:
    """Run ``model`` once on shadow tensors and record its autograd graph.

    With ``meta`` the ``meta`` device is tried first; a model that needs real values
    runs again on aliases of its real tensors.
    """
    if meta:
        try:
            return _run(model, example_inputs, meta=True)
        except Exception:  # the model's code needs real values: run it for real
            pass
    return _run(model, example_inputs, meta=False)
