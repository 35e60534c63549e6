"""The state a channel rule reads and writes while the tracer walks the autograd graph."""
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np
import torch

from ..layers import KindTable, LayerKind
from .channels import InputInfo, TensorChannels
from .slots import STRICT_KINDS, FrozenReason, SlotTable

#: Buffers a rotary embedding computes its ``cos``/``sin`` from, one entry per pair of
#: ``head_dim`` positions ``(i, i + d/2)`` (Hugging Face's ``rotary_emb``).
ROTARY_BUFFERS = ('inv_freq', 'original_inv_freq')


class TracingError(ValueError):
    """A traced op or shape that razorlib cannot prune through (raised under strict=True)."""


#: What grouped-query attention prunes (``gqa=``): ``'kv'`` a key/value head with all its
#: query heads; ``'query'`` query heads alike in every key/value group, key/value heads
#: whole (``tracing/heads.py: pair_heads``).
GQA_MODES = {'kv': 'prune a key/value head with its query heads',
             'query': 'prune query heads alike in every key/value group, keep key/value '
                      'heads whole'}

#: What a reshape's split into ``(heads, head_dim)`` prunes when attention reads it
#: (``heads=``): ``'whole'`` whole heads, ``head_dim`` unchanged; ``'width'`` the same
#: ``head_dim`` positions of every head, the head count unchanged
#: (``tracing/heads.py: read_as_heads``).
HEAD_MODES = {'whole': 'prune whole attention heads',
              'width': 'prune the same head_dim positions of every head'}


def check_mode(option: str, value: str, modes: Dict[str, str]) -> str:
    """``value`` if it is one of ``modes``; a ValueError naming the option and each mode.

    Example:
        >>> check_mode('gqa', 'query', GQA_MODES)
        'query'
        >>> check_mode('heads', 'dim', HEAD_MODES)
        Traceback (most recent call last):
        ...
        ValueError: heads must be 'whole' (prune whole attention heads) or 'width' (prune \
the same head_dim positions of every head), got 'dim'
    """
    if value not in modes:
        allowed = ' or '.join(f'{mode!r} ({what})' for mode, what in modes.items())
        raise ValueError(f'{option} must be {allowed}, got {value!r}')
    return value


def check_gqa(gqa: str) -> str:
    """``gqa`` checked against :data:`GQA_MODES`."""
    return check_mode('gqa', gqa, GQA_MODES)


def check_heads(heads: str) -> str:
    """``heads`` checked against :data:`HEAD_MODES`."""
    return check_mode('heads', heads, HEAD_MODES)


@dataclass
class ChannelUse:
    """One axis of a module or parameter whose channels follow slots.

    Args:
        name: module name (roles ``in``/``out``/``norm``) or parameter/buffer name
            (role ``param``).
        role: ``in`` (input channels of a conv/linear), ``out`` (its output channels),
            ``norm`` (the channels of a BN/LN/GN) or ``param`` (one dim of a bare tensor
            such as a layer-scale ``gamma`` or a ``pos_embed``).
        slots: one slot id per channel index of that axis.
        dim: the tensor dim for role ``param``.
    """
    name: str
    role: str
    slots: np.ndarray
    dim: int = 0


class TraceContext:
    """Shared state of one trace: slots, channel uses and the graph around each node.

    ``kinds`` says which modules are layers (:mod:`razorlib.layers`): their parameters
    are sliced with the layer, every other parameter the forward uses is a bare one.
    ``gqa`` says how grouped-query attention pairs its heads (:data:`GQA_MODES`),
    ``heads`` whether attention prunes whole heads or their width (:data:`HEAD_MODES`).
    """

    def __init__(self, model: torch.nn.Module, strict: bool,
                 node_modules: Dict[object, List[str]],
                 owners: Dict[int, List[Tuple[str, str]]],
                 kinds: Optional[KindTable] = None,
                 modules: Optional[Dict[str, torch.nn.Module]] = None, gqa: str = 'kv',
                 heads: str = 'whole',
                 own_sizes: Optional[Dict[object, Tuple[bool, ...]]] = None):
        self.strict = strict
        #: view/reshape node -> for each size its call asked for, whether the code gave
        #: it as a number of its own (``literal_sizes.SizeWatch.own_sizes``): such a size
        #: stays in the slim model, where the others follow the widths.  The same for
        #: each shift of a roll node.
        self.own_sizes = own_sizes or {}
        self.gqa = check_gqa(gqa)
        self.heads = check_heads(heads)
        #: slots that are ``head_dim`` positions (``heads='width'``): a slice of them may
        #: follow the pruning (``shape_rules.slice_``).
        self.head_width: Set[int] = set()
        #: slots read as whole heads (``heads='whole'``): pruning them changes a head count
        #: that the code may keep as a number of its own, which would re-split the slim
        #: heads without an error (``StructurePruner`` compares slim and masked outputs).
        self.whole_heads: Set[int] = set()
        #: slots a sum or a product of activations adds up over: dropping them is exact
        #: only where the pruned channels are zero there, which an op between the layer
        #: and the sum can undo (``exp``, ``sigmoid``, ``+ 1``) (``StructurePruner``
        #: compares slim and masked outputs).
        self.summed: Set[int] = set()
        #: slots a slice or a ``split(sizes)`` of a channel dim reads at bounds the code
        #: computes: the slim slice takes the same channels only where those bounds follow
        #: the slim widths (``StructurePruner`` compares slim and masked outputs).
        self.sliced: Set[int] = set()
        #: (attention module, head_dim) -> the positions its first split read as heads
        #: carries: its other splits are bound to them (``heads.read_as_heads``).
        self.head_positions: Dict[Tuple[str, int], np.ndarray] = {}
        self.kinds = kinds or KindTable()
        self.slots = SlotTable()
        self.uses: Dict[Tuple[str, str, int], ChannelUse] = {}
        self.node_modules = node_modules
        self.consumers: Dict[object, List[object]] = defaultdict(list)
        self._layer_out: Dict[str, np.ndarray] = {}
        #: layer name -> the (negative) dim of the first output of an op its kind traced
        #: that holds the layer's output channels: where a layer whose forward never runs
        #: (``F.conv1d(x, conv.weight)``) puts them, for its masks' shape.
        self.op_out_dims: Dict[str, int] = {}
        self._leaf_channels: Dict[int, TensorChannels] = {}
        #: id -> a layer's own parameter or buffer that a rule read (``layer_params.py``)
        self._layer_leaves: Dict[int, torch.Tensor] = {}
        self.modules = dict(model.named_modules()) if modules is None else modules
        #: node -> a function that applies its rule when a rule first reads its output
        #: (the tracer defers transposed parameters, see ``tracer._walk``).
        self.lazy_channels: Dict[object, Callable[[], Optional[TensorChannels]]] = {}
        self._owners = owners

    # ----------------------------------------------------------------- lookups
    def owner(self, tensor: Optional[torch.Tensor]) -> Optional[Tuple[str, str]]:
        """``(module_name, attribute)`` of a parameter or buffer of the model (the first
        of its owners, for a tied one)."""
        found = self.owners_of(tensor)
        return found[0] if found else None

    def owners_of(self, tensor: Optional[torch.Tensor]) -> List[Tuple[str, str]]:
        """Every ``(module_name, attribute)`` holding the tensor: several for a tied
        weight (input embeddings and ``lm_head``)."""
        return [] if tensor is None else self._owners.get(id(tensor), [])

    def shared_params(self) -> List[List[Tuple[str, str]]]:
        """The owners of each tensor held by several modules (a tied weight), in the
        order of ``named_modules``."""
        return [owners for owners in self._owners.values()
                if len({name for name, _ in owners}) > 1]

    def tensor_name(self, tensor: torch.Tensor) -> Optional[str]:
        found = self.owner(tensor)
        if found is None:
            return None
        return f'{found[0]}.{found[1]}' if found[0] else found[1]

    def module_of_node(self, node) -> Optional[str]:
        """The innermost module whose forward returned this node's output."""
        names = [n for n in self.node_modules.get(node, ()) if n]
        return max(names, key=lambda n: n.count('.')) if names else None

    def layer_kind(self, module_name: Optional[str]) -> Optional[LayerKind]:
        """The layer kind of a module of the model (None for a name or module without)."""
        module = self.modules.get(module_name) if module_name is not None else None
        return self.kinds.kind_of(module) if module is not None else None

    # ----------------------------------------------------------------- slots
    def bind(self, a: np.ndarray, b: np.ndarray, reason: str) -> None:
        self.slots.bind(a, b, reason)

    def freeze(self, slots: np.ndarray, kind: str, node, message: str,
               op: Optional[str] = None) -> None:
        """Freeze ``slots`` with a reason naming the op (``op``, else the node's name) and
        its neighbouring modules."""
        if not slots.size:
            return
        if op is None:
            op = node.name() if node is not None else ''
        upstream, downstream = self.neighbours(node) if node is not None else ((), ())
        reason = FrozenReason(kind, op, message, upstream, downstream)
        if self.strict and kind in STRICT_KINDS:
            raise TracingError(str(reason) + '. Use strict=False to freeze these channels '
                               'instead, or add a rule (docs/tracing_rules.md).')
        self.slots.freeze(slots, reason)

    def freeze_all(self, inputs: Iterable[InputInfo], kind: str, node, message: str) -> None:
        for inp in inputs:
            if inp.channels is not None:
                self.freeze(inp.channels.all_slots(), kind, node, message)

    def external(self, size: int, node, what: str) -> np.ndarray:
        """Fresh frozen slots for channels that come from outside the traced model."""
        slots = self.slots.allocate(size, 'external', what)
        self.slots.freeze(slots, FrozenReason('external', node.name() if node else '', what))
        return slots

    def layer_out(self, module_name: str, size: int) -> np.ndarray:
        """Output slots of a layer; a layer called several times reuses the same ones."""
        if module_name not in self._layer_out:
            self._layer_out[module_name] = self.slots.allocate(size, 'layer', module_name)
        return self._layer_out[module_name]

    def leaf_channels(self, tensor: torch.Tensor) -> TensorChannels:
        """Channels of a parameter/buffer leaf: fresh slots on each dim of size > 1."""
        key = id(tensor)
        if key not in self._leaf_channels:
            name = self.tensor_name(tensor)
            shape = tuple(tensor.shape)
            if name is None:  # an input that requires grad: channels fixed from outside
                self._leaf_channels[key] = TensorChannels(shape)
                return self._leaf_channels[key]
            # A layer's own weight and bias are sliced with the layer, not as bare tensors
            # (nn.Linear on a non-contiguous input adds its bias as a separate op).
            module_name, attr = self.owner(tensor)
            bare = self.layer_kind(module_name) is None
            if not bare:
                self._layer_leaves[key] = tensor
            slots = {}
            for dim, size in enumerate(shape):
                if size > 1:
                    slots[dim] = self.slots.allocate(size, 'param', f'{name}:{dim}')
                    if bare:
                        self.use(name, 'param', slots[dim], dim=dim)
            if bare and attr in ROTARY_BUFFERS and 0 in slots:
                self._bind_rotary_copies(module_name, attr, slots[0])
            self._leaf_channels[key] = TensorChannels(shape, slots)
        return self._leaf_channels[key]

    def _bind_rotary_copies(self, module_name: str, attr: str, slots: np.ndarray) -> None:
        """Bind a rotary buffer the forward reads to its module's other rotary buffers of
        its shape: ``original_inv_freq``, which dynamic RoPE copies back into ``inv_freq``,
        is sliced with it though this forward never reads it."""
        module = self.modules[module_name]
        for other in ROTARY_BUFFERS:
            buffer = module._buffers.get(other)
            if other != attr and buffer is not None and buffer.shape == (len(slots), ):
                self.bind(self.buffer_slots(module_name, other), slots,
                          f'{module_name}.{other} is a copy of {module_name}.{attr}')

    def layer_params_read(self) -> List[Tuple[torch.Tensor, TensorChannels]]:
        """Each layer parameter or buffer a rule read, with the slots it was given: the
        layer slices it, so ``layer_params.tie_layer_params`` ties them to its axes."""
        return [(tensor, self._leaf_channels[key]) for key, tensor in self._layer_leaves.items()]

    def traced_leaf_channels(self, tensor: torch.Tensor) -> Optional[TensorChannels]:
        """Channels of a parameter/buffer leaf if a rule has read them, else None."""
        return self._leaf_channels.get(id(tensor))

    def buffer_slots(self, module_name: str, attr: str) -> np.ndarray:
        """Slots of dim 0 of a buffer the traced forward used outside autograd (a rotary
        module's ``inv_freq``, read under ``no_grad``): the same slots on every call,
        sliced with the group they are bound to."""
        name = f'{module_name}.{attr}' if module_name else attr
        use = self.uses.get((name, 'param', 0))
        if use is None:
            size = getattr(self.modules[module_name], attr).shape[0]
            self.use(name, 'param', self.slots.allocate(size, 'param', f'{name}:0'))
            use = self.uses[(name, 'param', 0)]
        return use.slots

    def is_head_width(self, slots: np.ndarray) -> bool:
        """Whether every slot is a ``head_dim`` position (``heads='width'``)."""
        return bool(slots.size) and all(int(s) in self.head_width for s in slots)

    def use(self, name: str, role: str, slots: np.ndarray, dim: int = 0) -> None:
        """Record that ``name``'s ``role`` axis follows ``slots``.

        A second record of the same axis (a module called twice) binds the two.
        """
        key = (name, role, dim)
        if key in self.uses:
            self.bind(self.uses[key].slots, slots, f'{name} is called more than once')
        else:
            self.uses[key] = ChannelUse(name, role, slots, dim)

    def channel_input(self, inp: InputInfo, dim: int, size: int, consumer: str,
                      node) -> np.ndarray:
        """Slots that reach ``consumer`` on its channel ``dim``.

        Slots on any other dim (say channels that a reshape moved onto a spatial dim, or
        folded into the rows of a Linear over tokens or into a conv's batch) cannot be
        sliced by the consumer and are frozen, also where its own channel dim carries
        none: the layer's output holds only its own channels, so theirs would vanish
        there unfrozen.  An untracked input (model input, constant) gets fresh frozen
        slots.
        """
        tc = inp.channels
        if tc is not None:
            dim = dim % max(tc.ndim, 1)
            for other in tc.channel_dims:
                if other != dim:
                    self.freeze(tc.slots[other], 'shape', node,
                                f'channels reach dim {other} of {consumer}, which is not its '
                                f'channel dim {dim}')
        if tc is None or dim not in tc.slots:
            return self.external(size, node, f'the input channels of {consumer} are fixed '
                                 '(a model input, a constant or frozen channels)')
        slots = tc.slots[dim]
        if len(slots) != size:
            self.freeze(slots, 'shape', node,
                        f'{consumer} expects {size} channels, got {len(slots)}')
            return self.external(size, node, f'the input channels of {consumer} do not match '
                                 'its producer')
        return slots

    # ----------------------------------------------------------------- neighbours
    def neighbours(self, node, limit: int = 256) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
        """Nearest modules upstream and downstream of ``node`` (for messages)."""
        return (self._nearest(node, lambda n: [c for c, _ in n.next_functions if c], limit),
                self._nearest(node, lambda n: self.consumers.get(n, []), limit))

    def _nearest(self, start, step, limit: int) -> Tuple[str, ...]:
        found: List[str] = []
        frontier, seen = list(step(start)), {start}
        while frontier and len(seen) < limit:
            node = frontier.pop(0)
            if node in seen:
                continue
            seen.add(node)
            name = self.module_of_node(node)
            if name is not None:
                if name not in found:
                    found.append(name)
                continue
            frontier.extend(step(node))
        return tuple(found[:3])


def normalize_dim(dim: int, ndim: int) -> int:
    """Negative dims to non-negative ones.

    grad_fns save dims as unsigned 64-bit values, so ``-1`` reads ``2**64 - 1``.
    """
    if dim >= 2**63:
        dim -= 2**64
    return dim + ndim if dim < 0 else dim


def dims_tuple(dims: Sequence[int], ndim: int) -> Tuple[int, ...]:
    return tuple(sorted(normalize_dim(d, ndim) for d in dims))


def output_shapes(node) -> List[Tuple[int, ...]]:
    """Forward output shapes of a grad_fn node (one per forward output)."""
    return [tuple(meta.shape) for meta in node._input_metadata]
