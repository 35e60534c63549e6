"""LayerKind: everything razorlib knows about one module type, in one class.

A kind answers, for the module types it covers:

- **tracing**: which autograd ops it runs on its own weights (``grad_fns``) and how its
  channel axes bind to the slots of its input and output (:meth:`LayerKind.trace`);
- **masking**: its channel axes and widths (:meth:`widths`), how its input mask
  broadcasts (:meth:`in_mask_trailing`) and its masked output (:meth:`masked_output`),
  which must equal the sliced module's output on the kept channels;
- **slicing**: the new tensors and attributes at kept channel indices
  (:meth:`plan_slice`), planned without touching the module;
- **importance**: the weights that each channel of an axis owns (:meth:`channel_weights`),
  the rows that pruning that channel removes;
- **counting**: parameters and FLOPs at kept widths (:meth:`params`, :meth:`flops`).

The tracer, the masks, slicing, importance criteria and the complexity counter read
kinds and hold no per-type code of their own; ``docs/layer_kinds.md`` adds one.
"""
import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn as nn

__all__ = ['LayerKind', 'SlicePlan', 'take', 'Kept', 'IN_MASK', 'OUT_MASK', 'kept_widths']

#: The mask buffers of a masked module: its input and output channels kept (1) or not.
IN_MASK, OUT_MASK = 'in_mask', 'out_mask'

#: Kept channel count per axis (``'in'``, ``'out'``); a missing axis keeps all.
Kept = Dict[str, int]


@dataclass
class SlicePlan:
    """New parameters, buffers and attributes for one module (applied all at once)."""
    params: Dict[str, torch.Tensor] = field(default_factory=dict)
    buffers: Dict[str, torch.Tensor] = field(default_factory=dict)
    attrs: Dict[str, Any] = field(default_factory=dict)

    def apply(self, module: nn.Module) -> None:
        for attr, tensor in self.params.items():
            old = module._parameters[attr]
            if tensor is old:  # kept whole: a weight tied to another module stays tied
                continue
            module._parameters[attr] = nn.Parameter(tensor.contiguous(),
                                                    requires_grad=old.requires_grad)
        for attr, tensor in self.buffers.items():
            module._buffers[attr] = tensor.contiguous()
        for attr, value in self.attrs.items():
            setattr(module, attr, value)

    def applied_to_copy(self, module: nn.Module) -> nn.Module:
        """A shallow copy of ``module`` with the plan applied, ``module`` left as it is.

        The copy holds the planned tensors themselves rather than new parameters, so
        gradients flow back through them to ``module``'s own: a kind runs a subclass's own
        forward on it to compute, inside a masked (and trained) supernet, what the sliced
        module will.  Children are shared, not copied.

        Example:
            >>> norm = nn.LayerNorm(4)
            >>> plan = SlicePlan(params={'weight': norm.weight[:2]},
            ...                  attrs={'normalized_shape': (2, )})
            >>> view = plan.applied_to_copy(norm)
            >>> view.weight.shape, norm.weight.shape, view.weight.grad_fn is not None
            (torch.Size([2]), torch.Size([4]), True)
        """
        clone = copy.copy(module)
        clone.__dict__['_parameters'] = {**module._parameters, **self.params}
        clone.__dict__['_buffers'] = {**module._buffers, **self.buffers}
        for attr, value in self.attrs.items():
            setattr(clone, attr, value)
        return clone


def take(tensor: torch.Tensor, dim: int, index: Sequence[int]) -> torch.Tensor:
    """``tensor`` restricted to ``index`` along ``dim``.

    Keeping everything returns ``tensor`` itself; a ``meta`` tensor only changes shape
    (how ``verify`` slices its shape-only copy cheaply).

    Example:
        >>> take(torch.arange(6).view(2, 3), 1, [0, 2])
        tensor([[0, 2],
                [3, 5]])
    """
    if list(index) == list(range(tensor.shape[dim])):
        return tensor
    if tensor.is_meta:
        shape = list(tensor.shape)
        shape[dim] = len(index)
        return tensor.new_empty(shape)
    return tensor.index_select(dim, torch.as_tensor(index, device=tensor.device))


def kept_widths(module: nn.Module, widths: Dict[str, int]) -> Dict[str, int]:
    """``widths`` with each axis whose mask buffer the module has at its kept count.

    Example:
        >>> conv = nn.Conv2d(4, 4, 1)
        >>> conv.register_buffer(OUT_MASK, torch.tensor([1., 0., 1., 0.]))
        >>> kept_widths(conv, {'in': 4, 'out': 4})
        {'in': 4, 'out': 2}
    """
    masks = {'in': IN_MASK, 'out': OUT_MASK}
    kept = {}
    for axis, width in widths.items():
        buffer = module._buffers.get(masks[axis])
        kept[axis] = int(buffer.count_nonzero()) if buffer is not None else width
    return kept


class LayerKind:
    """What razorlib knows about a module type; subclass it to add a layer kind.

    Class attributes:
        module_types: the module classes this kind covers (subclasses too, unless a
            kind registered for the subclass is more specific), or their qualified
            names (``'transformers.pytorch_utils.Conv1D'``) for classes of optional
            packages.
        axes: the channel axes it has: ``('in', 'out')`` for a conv/linear, ``('out',)``
            for a norm or an embedding, ``()`` for a layer whose widths are fixed.
        grad_fns: the autograd node names (``'ConvolutionBackward0'``) of the op the
            layer runs on its own weight; the tracer hands those nodes to :meth:`trace`.
        weight_attrs: the parameter (or buffer) names through which the tracer
            recognises the layer in such an op.
        trace_by_output: also claim such an op when its weight is no parameter of the
            module (a weight computed in the forward) but the module's forward returns
            the op's output (norms without affine parameters).
        traced_as_module: the layer's forward is several plain ops (an RMSNorm): the
            tracer hands its output node to :meth:`trace` with the module's input as
            the one input, skipping the ops in between (``tracing/composite.py``).

    Instances are stateless; every method takes the module.

    Example:
        >>> from razorlib.layers import kind_of
        >>> conv = nn.Conv2d(8, 16, 3)
        >>> kind = kind_of(conv)
        >>> type(kind).__name__, kind.widths(conv)
        ('ConvKind', {'in': 8, 'out': 16})
        >>> kind.params(conv, {'in': 4, 'out': 8}) == 8 * 4 * 9 + 8
        True
    """
    module_types: Tuple[Union[type, str], ...] = ()
    axes: Tuple[str, ...] = ()
    grad_fns: Tuple[str, ...] = ()
    weight_attrs: Tuple[str, ...] = ('weight', )
    trace_by_output: bool = False
    traced_as_module: bool = False

    def __repr__(self) -> str:
        return f'{type(self).__name__}()'

    @classmethod
    def claims(cls, module_type: type) -> bool:
        """Whether this kind also covers ``module_type``, a class that no kind names in
        its ``module_types``: for families too large to list (transformers has over a
        hundred ``*RMSNorm`` classes).  Asked only when no kind names the type."""
        return False

    def covers(self, module: nn.Module) -> bool:
        """Whether this kind covers ``module``, one of its types: a family claimed by
        name whose members differ in layout (a router holding its own weight, or an
        ``nn.Linear`` child's) says here which ones it knows.  A module it does not
        cover has no kind."""
        return True

    # ------------------------------------------------------------------ tracing
    def trace(self, ctx: Any, node: Any, ins: Sequence[Any], name: str,
              module: nn.Module) -> Optional[Tuple[np.ndarray, int]]:
        """Bind the layer's channel axes while the tracer visits one of its ops.

        Args:
            ctx: the :class:`~razorlib.tracing.context.TraceContext` (``channel_input``,
                ``layer_out``, ``use``, ``bind``, ``freeze``).
            node: the autograd node of the op (its name is in :attr:`grad_fns`).
            ins: the node's inputs (:class:`~razorlib.tracing.channels.InputInfo`).
            name: the module's name in the model.
            module: the module.

        Returns:
            ``(output slots, output dim)``: the slots of the op output's channel dim, or
            None when this call cannot be followed (the tracer then treats the op as
            plain channel mixing and freezes its channels).
        """
        return None

    # ------------------------------------------------------------------ masking
    def widths(self, module: nn.Module) -> Dict[str, int]:
        """The number of channels on each of :attr:`axes`."""
        raise NotImplementedError(f'{type(self).__name__} does not say its widths')

    def in_mask_trailing(self, module: nn.Module) -> int:
        """How many trailing singleton dims the ``in`` mask needs to broadcast over the
        input (its spatial dims); 0 masks the last dim (linear layers)."""
        return 0

    def masked_output(self, module: nn.Module, x: torch.Tensor, output: torch.Tensor,
                      keep: torch.Tensor, call: Optional[Callable[[nn.Module, torch.Tensor],
                                                                  Any]] = None
                      ) -> torch.Tensor:
        """The output with the pruned ``out`` channels zeroed; ``keep`` is the mask buffer,
        shaped to broadcast on the output's channel dim.  Override where the layer's
        kept outputs depend on its pruned channels (a norm's statistics).  ``call(other,
        new_input)`` runs the module's forward as it was called (its other arguments as
        given) on another module and input, for a kind that reruns it; None: called on
        its input alone."""
        return output * keep

    # ------------------------------------------------------------------ slicing
    def unsliceable(self, module: nn.Module) -> Optional[str]:
        """Why this module cannot be sliced at all (None if it can)."""
        return None

    def plan_slice(self, name: str, module: nn.Module,
                   kept: Dict[str, Sequence[int]]) -> SlicePlan:
        """New tensors and attributes keeping ``kept[axis]`` (indices) on each axis named;
        raises ValueError naming ``name`` for a selection the layer cannot take."""
        raise NotImplementedError(f'{name}: {type(self).__name__} cannot be sliced')

    # ------------------------------------------------------------------ importance
    def channel_weights(self, module: nn.Module, axis: str) -> torch.Tensor:
        """``(channels, n)``: row ``c`` holds the weights that pruning channel ``c`` of
        ``axis`` removes (filters for ``out``, columns for ``in``)."""
        raise NotImplementedError(f'{type(self).__name__} has no weights on axis {axis!r}')

    # ------------------------------------------------------------------ counting
    def params(self, module: nn.Module, kept: Kept) -> int:
        """The module's own parameters (not its children's) at kept widths."""
        return sum(p.numel() for p in module.parameters(recurse=False))

    def flops(self, module: nn.Module, inputs: Tuple, output: Any, kept: Kept) -> int:
        """Multiply-accumulates of one call at kept widths (OpenMMLab's convention)."""
        return 0

    # ------------------------------------------------------------------ helpers
    def full(self, module: nn.Module, kept: Kept) -> Dict[str, int]:
        """``kept`` with every axis it leaves out at full width."""
        widths = self.widths(module)
        return {axis: kept.get(axis, width) for axis, width in widths.items()}
