"""``in_mask`` / ``out_mask`` buffers and the masked forwards they drive.

A masked module multiplies its input by ``in_mask`` and its output by ``out_mask``.  Each
mask is a float buffer shaped to broadcast on the module's channel dim (``(C, 1, 1)`` for
an NCHW conv output, ``(C,)`` for a channels-last one), which gives exactly the outputs of
the sliced model; where a layer's kept outputs depend on its pruned channels (LayerNorm,
GroupNorm statistics) its :class:`~razorlib.layers.LayerKind` computes the masked output.
A bare parameter (layer scale, position embedding) gets a keep-mask per pruned dim
(:func:`~razorlib.layers.param_mask_name`), read by the counter only: its pruned entries
meet channels that are zero already.

Hooks are module-level functions (bound to the kind and the module's name with
``functools.partial``) and the masks are persistent buffers: a masked model deep-copies,
pickles and round-trips its ``state_dict``.
"""
import contextlib
import inspect
from functools import lru_cache, partial
from typing import Any, Dict, Iterator, Optional, Tuple

import torch
import torch.nn as nn

from ..layers import IN_MASK, OUT_MASK, LayerKind, param_mask_name
from ..layers.parameter import PARAM_MASK
from ..tracing.forward import shadowed

__all__ = ['IN_MASK', 'OUT_MASK', 'MaskedInputError', 'add_masks', 'add_param_mask',
           'layer_input', 'set_mask', 'remove_masks', 'unmasked']


@lru_cache(maxsize=None)
def _input_name(module_type: type) -> Optional[str]:
    """The name of the first argument of ``module_type.forward`` (``input`` for torch's
    layers): how a call that passes the input by keyword names it."""
    names = list(inspect.signature(module_type.forward).parameters)[1:]
    return names[0] if names else None


def layer_input(module: nn.Module, args: Tuple, kwargs: Dict[str, Any],
                name: Optional[str] = None) -> torch.Tensor:
    """The input a masked layer is called on, positional or by keyword
    (``self.fc(input=x)``).

    Args:
        name: the module's qualified name in the model, which the error names: a hook
            sees only the module, and a model holds many of one class.

    Raises:
        TypeError: the call passes neither a positional argument nor the input's keyword.

    Example:
        >>> layer_input(nn.Linear(2, 2), (), {'inp': None}, 'head.fc')
        Traceback (most recent call last):
        ...
        TypeError: masked Linear 'head.fc' was called without its input (no positional \
argument and no 'input' keyword): its masks cannot apply
    """
    if args:
        return args[0]
    key = _input_name(type(module))
    if key in kwargs:
        return kwargs[key]
    who = type(module).__name__ + (f' {name!r}' if name is not None else '')
    raise TypeError(f'masked {who} was called without its input (no positional argument '
                    f'and no {key!r} keyword): its masks cannot apply')


class MaskedInputError(RuntimeError):
    """A masked layer called on an input whose channel count is not the layer's: ``x *
    in_mask`` would broadcast a 1-channel input to the layer's width, and the masked model
    would run an input the layer refuses.  A ``RuntimeError``, as the layer's own refusal.

    Attributes:
        layer: the layer, as the message starts with it: its qualified name and type
            (``'backbone.conv (Conv2d)'``), its type alone where its masks were added
            without a name.
        detail: what is wrong with the input, the message after the layer: for a caller
            that names the layer itself.
    """

    def __init__(self, layer: str, detail: str):
        super().__init__(f'{layer}: {detail}')
        self.layer, self.detail = layer, detail

    def __reduce__(self):
        """Rebuilt from its fields: the default rebuilds from the message alone, which
        ``__init__`` does not take (a process pool sends errors pickled)."""
        return type(self), (self.layer, self.detail)


def _mask_input(name: Optional[str], module: nn.Module, args: Tuple,
                kwargs: Dict[str, Any]) -> Tuple:
    x, mask = layer_input(module, args, kwargs, name), module.in_mask
    dim = -mask.dim()  # the input's channel dim, as the mask broadcasts
    if x.dim() < mask.dim() or x.shape[dim] != mask.shape[0]:
        # x * mask would broadcast a 1-channel input to the layer's width, and the masked
        # model would run an input the layer refuses
        where = f'{name} ({type(module).__name__})' if name else type(module).__name__
        raise MaskedInputError(where, f'its input has shape {tuple(x.shape)}, but it takes '
                               f'{mask.shape[0]} channels at dim {dim}')
    return _with_input(module, args, kwargs, x * mask)


def _with_input(module: nn.Module, args: Tuple, kwargs: Dict[str, Any],
                x: torch.Tensor) -> Tuple[Tuple, Dict[str, Any]]:
    """A call's ``(args, kwargs)`` with its input (:func:`layer_input`'s) replaced by ``x``."""
    if args:
        return (x, ) + tuple(args[1:]), kwargs
    return args, {**kwargs, _input_name(type(module)): x}


def _mask_output(kind: LayerKind, name: Optional[str], module: nn.Module, args: Tuple,
                 kwargs: Dict[str, Any], output: torch.Tensor) -> torch.Tensor:
    def call(other: nn.Module, x: torch.Tensor) -> Any:
        """The forward as called here, on ``other`` and ``x``; refused where the call
        passes another tensor of more than one value, which may carry the channels ``x``
        lost."""
        new_args, new_kwargs = _with_input(module, args, kwargs, x)
        if any(isinstance(value, torch.Tensor) and value is not x and value.numel() > 1
               for value in (*new_args, *new_kwargs.values())):
            raise ValueError(f'{name or type(module).__name__} ({type(module).__name__}): its '
                             'call passes a tensor besides its input, so its masked output '
                             'cannot be rerun on the kept channels')
        return type(module).forward(other, *new_args, **new_kwargs)

    extra = dict(call=call) if _takes_call(type(kind)) else {}
    return kind.masked_output(module, layer_input(module, args, kwargs, name), output,
                              module.out_mask, **extra)


@lru_cache(maxsize=None)
def _takes_call(kind_type: type) -> bool:
    """Whether the kind's ``masked_output`` takes ``call``: one written to the
    four-argument form (docs/layer_kinds.md) is called with those four."""
    return 'call' in inspect.signature(kind_type.masked_output).parameters


_HOOK_DICTS = ('_forward_pre_hooks', '_forward_hooks', '_forward_hooks_with_kwargs',
               '_forward_hooks_always_called', '_forward_pre_hooks_with_kwargs')


def _ones(channels: int, trailing: int, ref: torch.Tensor = None) -> torch.Tensor:
    kwargs = dict(device=ref.device, dtype=ref.dtype) if ref is not None else {}
    return torch.ones((channels, ) + (1, ) * trailing, **kwargs)


def add_masks(module: nn.Module, kind: LayerKind, out_dim: int,
              name: Optional[str] = None) -> None:
    """Give ``module`` all-ones masks on the axes of its ``kind`` and the hooks that apply
    them.

    Args:
        module: a module with a layer kind.
        kind: its kind (widths, how the input mask broadcasts, the masked output).
        out_dim: the negative dim of the module's output that holds the channels.
        name: the module's qualified name in the model, bound to the hooks so that their
            errors name it (:func:`layer_input`).

    Example:
        >>> from razorlib.layers import kind_of
        >>> conv = nn.Conv2d(2, 3, 3)
        >>> add_masks(conv, kind_of(conv), -3)
        >>> conv.in_mask.shape, conv.out_mask.shape
        (torch.Size([2, 1, 1]), torch.Size([3, 1, 1]))
    """
    ref = next(module.parameters(), None)
    widths = kind.widths(module)
    if 'in' in widths:
        module.register_buffer(IN_MASK, _ones(widths['in'], kind.in_mask_trailing(module), ref))
        module.register_forward_pre_hook(partial(_mask_input, name), with_kwargs=True)
    if 'out' in widths:
        module.register_buffer(OUT_MASK, _ones(widths['out'], -out_dim - 1, ref))
        module.register_forward_hook(partial(_mask_output, kind, name), with_kwargs=True)


def add_param_mask(owner: nn.Module, attr: str, dim: int) -> str:
    """Give ``owner`` an all-ones keep-mask of dim ``dim`` of its tensor ``attr``; returns
    the buffer's name."""
    tensor = getattr(owner, attr)
    name = param_mask_name(attr, dim)
    owner.register_buffer(name, torch.ones(tensor.shape[dim], device=tensor.device))
    return name


def set_mask(module: nn.Module, name: str, keep: torch.Tensor) -> None:
    """Write a boolean keep vector into a mask buffer in place."""
    buffer = module._buffers[name]
    buffer.copy_(keep.to(device=buffer.device, dtype=buffer.dtype).view(buffer.shape))


def _is_ours(hook) -> bool:
    return getattr(hook, 'func', hook) in (_mask_input, _mask_output)


def remove_masks(model: nn.Module) -> None:
    """Remove every mask buffer and masking hook: the model computes as before masking."""
    for module in model.modules():
        for name in [n for n in module._buffers
                     if n in (IN_MASK, OUT_MASK) or _param_mask_of(module, n)]:
            module._buffers.pop(name)
        hook_ids = [key for attr in ('_forward_pre_hooks', '_forward_hooks')
                    for key, fn in getattr(module, attr).items() if _is_ours(fn)]
        for attr in _HOOK_DICTS:
            hooks: Dict = getattr(module, attr, None) or {}
            for key in hook_ids:
                hooks.pop(key, None)


def _param_mask_of(module: nn.Module, buffer: str) -> bool:
    """Whether ``buffer`` is a keep-mask of one of ``module``'s tensors."""
    match = PARAM_MASK.match(buffer)
    return match is not None and isinstance(getattr(module, match['attr'], None), torch.Tensor)


@contextlib.contextmanager
def unmasked(model: nn.Module) -> Iterator[None]:
    """``model`` without a pruner's masks for a while, to trace it (the tracer refuses a
    masked model, which slicing unmasks): the mask buffers and hooks go from new hook
    tables, and :func:`~razorlib.tracing.forward.shadowed` puts the old ones back."""
    with shadowed(model, {}):
        for module in model.modules():
            for attr in _HOOK_DICTS:
                hooks = getattr(module, attr, None)
                if hooks:
                    setattr(module, attr, type(hooks)(hooks))
        remove_masks(model)
        yield
