"""One forward pass that records the autograd graph and which module produced what.

The forward runs on *shadow* parameters and buffers swapped in for the model's own
(:func:`shadowed`): by default on the ``meta`` device (shapes only, no arithmetic, so tracing a
ResNet-152 costs no convolutions), and, if the model's code needs real values (``.item()``,
data-dependent control flow), again on detached aliases of the real tensors.  Either way
the model's own tensors, ``requires_grad`` flags, modes and attributes are never changed:
the session snapshots every module's ``__dict__`` and puts it back.
"""
import contextlib
import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Tuple

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

from .literal_sizes import SizeWatch

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


def _like(x: torch.Tensor) -> torch.Tensor:
    """A fresh meta tensor with ``x``'s shape, strides and dtype.

    Inside a dispatch mode ``empty_like``/``new_empty`` run torch's Python reference
    kernels (~20 us); ``empty_strided`` on ``meta`` costs ~2 us.
    """
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device='meta')


def _new(x: torch.Tensor, size) -> torch.Tensor:
    """A fresh contiguous meta tensor of ``size`` with ``x``'s dtype."""
    return torch.empty(size, dtype=x.dtype, device='meta')


def _per_channel(n: int, *tensors) -> bool:
    """Whether each of ``tensors`` is absent or holds exactly ``n`` values in one dim."""
    return all(t is None or tuple(t.shape) == (n, ) for t in tensors)


# The shape kernels below return None for anything they do not fully check (mismatched
# sizes, unusual layouts): torch's own kernel then runs and raises its usual error, which
# is what the pruned run in ``pruning/verify.py`` relies on.

def _batch_norm(x, weight, bias, running_mean, running_var, *args):
    channels = x.shape[1] if x.dim() > 1 else 0
    if not channels or not _per_channel(channels, weight, bias, running_mean, running_var):
        return None
    return _like(x), _new(x, channels), _new(x, channels)


def _layer_norm(x, normalized_shape, weight, bias, eps):
    count = len(normalized_shape)
    if tuple(x.shape[x.dim() - count:]) != tuple(normalized_shape) or any(
            t is not None and tuple(t.shape) != tuple(normalized_shape) for t in (weight, bias)):
        return None
    stats = x.shape[:x.dim() - count] + (1, ) * count
    return _like(x), _new(x, stats), _new(x, stats)


def _group_norm(x, weight, bias, n, c, hxw, group, eps):
    if x.dim() < 2 or x.shape[1] != c or c % group or not _per_channel(c, weight, bias):
        return None
    return _like(x), _new(x, (n, group)), _new(x, (n, group))


def _convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups):
    """Output of ``aten.convolution`` from the textbook size formula."""
    spatial = x.dim() - 2
    if spatial < 1 or weight.dim() != x.dim() or not x.is_contiguous() \
            or len(stride) != spatial or len(padding) != spatial:
        return None
    in_channels = weight.shape[0] if transposed else weight.shape[1] * groups
    out_channels = weight.shape[1] * groups if transposed else weight.shape[0]
    if x.shape[1] != in_channels or out_channels % groups or not _per_channel(out_channels,
                                                                              bias):
        return None
    size = [x.shape[0], out_channels]
    kernel = weight.shape[2:]
    for i in range(spatial):
        span = dilation[i] * (kernel[i] - 1)
        if transposed:
            size.append((x.shape[i + 2] - 1) * stride[i] - 2 * padding[i] + span
                        + output_padding[i] + 1)
        else:
            size.append((x.shape[i + 2] + 2 * padding[i] - span - 1) // stride[i] + 1)
    return _new(x, size) if min(size) > 0 else None


#: Elementwise ops whose output has their first input's shape and dtype when every
#: tensor operand matches it (no broadcasting, no type promotion).
_SAME_AS_INPUT = tuple(getattr(torch.ops.aten, name) for name in (
    'add', 'sub', 'mul', 'div', 'relu', 'gelu', 'silu', 'sigmoid', 'tanh', 'hardtanh',
    'hardswish', 'hardsigmoid', 'leaky_relu', 'elu', 'clamp', 'clamp_min', 'neg', 'mish',
    'softplus'))
_IN_PLACE = tuple(getattr(torch.ops.aten, name + '_') for name in (
    'add', 'sub', 'mul', 'div', 'relu', 'silu', 'sigmoid', 'hardtanh', 'hardswish',
    'hardsigmoid', 'leaky_relu', 'elu', 'clamp', 'clamp_min'))
_ELEMENTWISE = {op: False for op in _SAME_AS_INPUT}
_ELEMENTWISE.update({op: True for op in _IN_PLACE})


def _elementwise(in_place: bool, x, *args, **kwargs):
    """An elementwise op whose tensor operands all look like ``x``; None to fall back."""
    if not x.is_floating_point() or not x.is_contiguous():
        return None
    for arg in itertools.chain(args, kwargs.values()):
        if isinstance(arg, torch.Tensor) and (arg.shape != x.shape or arg.dtype != x.dtype
                                              or not arg.is_contiguous()):
            return None
    return x if in_place else _like(x)


class FastMetaOps(TorchDispatchMode):
    """Shape-only kernels for the ops a meta forward spends its time in.

    torch's meta kernels for norms, convolutions and many elementwise ops are Python
    decompositions costing 20 us to 1 ms each, most of a meta forward; tracing needs only
    the shapes.  Unusual cases (broadcasting, type promotion, strided layouts) fall back
    to torch's own kernels.  The mode sits below autograd, so the grad_fn nodes
    (``NativeBatchNormBackward0``...) are recorded as usual.

    Example:
        >>> x = torch.empty(1, 3, 32, 32, device='meta', requires_grad=True)
        >>> w = torch.empty(8, 3, 3, 3, device='meta', requires_grad=True)
        >>> with FastMetaOps():
        ...     y = torch.relu(torch.conv2d(x, w, stride=2))
        >>> tuple(y.shape), y.grad_fn.name()
        ((1, 8, 15, 15), 'ReluBackward0')
    """

    _SHAPE_KERNELS = {
        torch.ops.aten.native_batch_norm.default: _batch_norm,
        torch.ops.aten.native_layer_norm.default: _layer_norm,
        torch.ops.aten.native_group_norm.default: _group_norm,
        torch.ops.aten.convolution.default: _convolution,
    }

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if args and isinstance(args[0], torch.Tensor) and args[0].device.type == 'meta':
            fast = self._SHAPE_KERNELS.get(func)
            if fast is not None:
                out = fast(*args, **kwargs)
            else:
                in_place = _ELEMENTWISE.get(func.overloadpacket)
                out = None if in_place is None else _elementwise(in_place, *args, **kwargs)
            if out is not None:
                return out
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
        shadows: the stand-in tensors the forward ran on, by parameter/buffer name; kept
            alive with the record so the ``id`` keys of ``owners`` stay unique.
        sizes: how the model's code sized its views and which sizes it read.
    """
    outputs: List[torch.Tensor]
    node_modules: Dict[Any, List[str]] = field(default_factory=lambda: defaultdict(list))
    module_outputs: List[Tuple[Any, int, str]] = field(default_factory=list)
    calls: Dict[str, int] = field(default_factory=lambda: defaultdict(int))
    owners: Dict[int, Tuple[str, str]] = field(default_factory=dict)
    device: str = 'meta'
    shadows: Dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    sizes: SizeWatch = field(default_factory=SizeWatch, repr=False)


def shadow_tensors(model: nn.Module, meta: bool) -> Dict[str, torch.Tensor]:
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
    that forward fills in place, or the parameter and buffer tables)."""
    return {key: (value, value.copy() if type(value) in _CONTAINERS else None)
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


@contextlib.contextmanager
def shadowed(model: nn.Module, shadows: Dict[str, torch.Tensor]) -> Iterator[None]:
    """Put ``shadows`` in place of the model's parameters and buffers for a while.

    Inside, anything may change the modules (their tensors, attributes, caches, modes):
    on exit every module's ``__dict__`` and parameter/buffer tables are put back as they
    were, so the real tensors are never touched.  Cheaper than ``functional_call`` or a
    deep copy, which is what makes shape-only forwards of large models fast.

    Example:
        >>> conv = nn.Conv2d(3, 8, 3)
        >>> with shadowed(conv, shadow_tensors(conv, meta=True)):
        ...     conv.weight.device.type
        'meta'
        >>> conv.weight.device.type
        'cpu'
    """
    modules = dict(model.named_modules(remove_duplicate=False))
    snapshot = {module: _snapshot(module) for module in modules.values()}
    try:
        for name, tensor in shadows.items():
            owner, _, attr = name.rpartition('.')
            module = modules[owner]
            table = module._parameters if attr in module._parameters else module._buffers
            table[attr] = tensor
        yield
    finally:
        for module, attrs in snapshot.items():
            _restore(module, attrs)


def _run(model: nn.Module, example_inputs: Any, meta: bool) -> ForwardRecord:
    shadows = shadow_tensors(model, meta)
    record = ForwardRecord([], device='meta' if meta else 'real', shadows=shadows)
    for name, tensor in shadows.items():
        owner, _, attr = name.rpartition('.')
        record.owners.setdefault(id(tensor), (owner, attr))

    def hook_for(name: str):
        def hook(module, args, output):
            record.calls[name] += 1
            with torch._C.DisableTorchFunction():  # not the model's code: SizeWatch skips it
                for tensor in flatten_tensors(output):
                    if tensor.grad_fn is not None:
                        record.node_modules[tensor.grad_fn].append(name)
                        record.module_outputs.append((tensor.grad_fn, tensor.output_nr, name))
        return hook

    handles = [m.register_forward_hook(hook_for(name)) for name, m in model.named_modules()]
    try:
        with shadowed(model, shadows):
            model.eval()
            inputs = to_meta(example_inputs) if meta else example_inputs
            with torch.enable_grad(), record.sizes, \
                    (FastMetaOps() if meta else contextlib.nullcontext()):
                outputs = call_model(model, inputs)
    finally:
        for handle in handles:
            handle.remove()
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
