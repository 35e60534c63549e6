"""Which channels the model's code may size by hand, so only those need a pruned run.

Autograd records what a view, an expand or a split produced, not where its sizes came
from: ``torch.flatten(x, 1)`` and ``x.view(1, 2048)`` leave the same ``ViewBackward0``,
and only the second breaks once channels are cut.  During the traced forward a light
function mode, :class:`SizeWatch`, sees the model code's own calls: the sizes each view,
reshape or expand asked for (``-1`` is inferred, so it follows the channels), the splits,
flattens and builtins (Linear on 3-D input) whose sizes torch computes itself, and the
tensors whose sizes the code read (``x.shape``, ``x.size(1)``).  After the walk,
:func:`size_dependent_slots` collects the slots that reach

- an op whose sizes come from the code (rule ``sizes='code'``) and were not seen to
  follow the channels, or a roll along a channel dim (rule ``sizes='shifts'``): a
  shift of the code's own may still be a width (``self.conv.out_channels // 2``);
- a norm (rule ``sizes='module'``) that no norm module owns, so its shape is the code's;
- an elementwise op, concat or per-channel op with an operand autograd does not track
  that is more than a scalar (a tensor the code built with a size of its own, the mask
  of ``masked_fill``);
- a size the code read;
- a call that took them with autograd history and returned tensors without any
  (``x.detach().mean(1)``, an op under ``torch.no_grad()``, a comparison, an ``argmax``):
  what it computed from them is invisible to the walk, so no rule sees it reduce or mix
  them.

``pruning/verify.py`` runs the model with exactly those groups pruned; a group none of
them touches has nothing in the code that could size it by hand.

A parameter (or float buffer) the code reads outside autograd is not checked but frozen
(:func:`freeze_untracked_params`): its channels, and those an op combines with what was
computed from it.  A run cannot tell such a read apart from one that follows the pruning:
``x * self.alpha.detach()`` with ``alpha`` sliced with another group runs, and halving
every group alike keeps the same channels of both.
"""
import itertools
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch.autograd.function import BackwardCFunction
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from .basic_rules import moved_dims
from .channels import TensorChannels
from .context import ROTARY_BUFFERS, TraceContext, normalize_dim
from .layer_rules import find_layer
from .rules import UNKNOWN, rule_for

#: A view/split whose sizes torch derived from its input.
COMPUTED = 'computed'

_WATCHED: Dict[Any, str] = {
    **{fn: 'read' for fn in (torch.Tensor.size, torch.Tensor.shape.__get__,
                             torch.Tensor.numel, torch.Tensor.__len__)},
    **{fn: 'request' for fn in (torch.Tensor.view, torch.Tensor.reshape, torch.reshape,
                                torch.Tensor.expand)},
    **{fn: COMPUTED for fn in (torch.flatten, torch.Tensor.flatten, torch.chunk,
                               torch.Tensor.chunk, torch.Tensor.expand_as,
                               torch.Tensor.view_as, torch.Tensor.reshape_as)},
    # builtins that reshape their operands internally (Linear on 3-D input is a view, a
    # matrix product and a view), with sizes torch takes from those operands
    **{fn: 'internal' for fn in (F.linear, torch.matmul, torch.Tensor.matmul,
                                 torch.Tensor.__matmul__)},
}

#: Calls that roll their operand by shifts of the code's.
_ROLLS = frozenset((torch.roll, torch.Tensor.roll))

#: Calls whose result depends on their operand's sizes only, never on its values: one
#: without autograd history follows the slim widths as ``-1`` does.
_SHAPE_ONLY = frozenset((torch.zeros_like, torch.ones_like, torch.empty_like, torch.full_like,
                         torch.rand_like, torch.randn_like, torch.Tensor.new_zeros,
                         torch.Tensor.new_ones, torch.Tensor.new_empty, torch.Tensor.new_full))

#: Calls that read only the dtype and device of their operands after the first.
_TYPE_ONLY = frozenset((torch.Tensor.to, torch.Tensor.type_as))

#: Calls that turn a tensor's values into Python numbers.
_TO_PYTHON = frozenset((torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__float__,
                        torch.Tensor.__int__, torch.Tensor.__bool__, torch.Tensor.__index__))

#: Calls whose first operand is data that the second (a weight) is applied to.
_DATA_FIRST = frozenset((F.linear, F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d,
                         F.conv_transpose2d, F.conv_transpose3d, torch.matmul, torch.mm,
                         torch.bmm, torch.Tensor.matmul, torch.Tensor.__matmul__,
                         torch.Tensor.mm, torch.Tensor.bmm))

#: Parameters (or float buffers) by ``id``.
Leaves = Dict[int, torch.Tensor]

#: The walk's channels of every ``(node, output_nr)``.
Channels = Dict[Tuple[Any, int], TensorChannels]


def _traced(ctx: TraceContext, channels: Channels, node, nr: int) -> Optional[TensorChannels]:
    """Channels the walk gave an output or a leaf (leaves no rule read have none)."""
    variable = getattr(node, 'variable', None)
    if variable is not None:
        return ctx.traced_leaf_channels(variable)
    return channels.get((node, nr))


class ReadSize(int):
    """A size the model's code read from a tensor (``x.shape``, ``x.size(1)``), or computed
    from one by integer arithmetic (``c // g``): :class:`SizeWatch` hands the code these,
    so a view's sizes tell which the code gave as numbers of its own (a literal group
    count, which stays in the slim model) and which follow the widths it read.  Any other
    operation gives a plain ``int``.

    Example:
        >>> c = ReadSize(8)
        >>> [type(v).__name__ for v in (c // 2, 2 * c - 1, c / 2, 2)]
        ['ReadSize', 'ReadSize', 'float', 'int']
    """
    __slots__ = ()


def _keeps_read(name: str):
    """``int``'s operator ``name`` whose integer results stay :class:`ReadSize`."""
    plain = getattr(int, name)

    def operator(self, *args):
        value = plain(self, *args)
        return ReadSize(value) if type(value) is int else value
    operator.__name__ = name
    return operator


for _name in ('__add__', '__radd__', '__sub__', '__rsub__', '__mul__', '__rmul__',
              '__floordiv__', '__rfloordiv__', '__mod__', '__rmod__', '__pow__', '__rpow__',
              '__lshift__', '__rlshift__', '__rshift__', '__rrshift__', '__neg__', '__pos__',
              '__abs__'):
    setattr(ReadSize, _name, _keeps_read(_name))


def _as_read(value: Any) -> Any:
    """A size (or ``torch.Size``) a read returned, as :class:`ReadSize` values."""
    if isinstance(value, torch.Size):
        return torch.Size([ReadSize(v) for v in value])
    return ReadSize(value) if type(value) is int else value


def _requested_sizes(args: Sequence[Any], kwargs: Dict[str, Any]) -> Optional[Tuple[Any, ...]]:
    """The sizes a ``view``/``reshape``/``expand`` call asked for, or None if not ints
    (plain ones or :class:`ReadSize`)."""
    sizes = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
    if not args:
        sizes = kwargs.get('shape', kwargs.get('size', ()))
    return tuple(sizes) if sizes and all(type(s) in (int, ReadSize) for s in sizes) else None


class SizeWatch(TorchFunctionMode):
    """Records, during a forward, how the model's code sizes its views and reads sizes,
    and the grad_fn of every tensor its torch calls return.

    The autograd graph only links a node to its inputs, so a walk from the outputs never
    meets an op whose result nothing uses (an SE gate multiplied into a map that is then
    dropped, an ``add`` or ``cat`` computed and discarded).  Such an op still runs in the
    pruned model and still needs its operands' channels to agree, so the tracer walks
    from :attr:`created` too.  (A custom ``autograd.Function`` is not a torch call: its
    node is seen only through the ops that take its result, the module that returns it
    or the model's output, and so is what its forward read, :attr:`function_reads`.)
    One mode does both jobs, so each torch call of the model pays for one.

    Attributes:
        requested: grad_fn of a view/reshape/expand output -> the sizes its call asked
            for, or :data:`COMPUTED` for flatten/chunk/``*_as`` calls.
        own_sizes: grad_fn of a view/reshape/expand output whose sizes are ints -> for
            each, whether the code gave it as a number of its own: neither ``-1`` nor
            computed from a size it read (:class:`ReadSize`, which the reads return).
            Also grad_fn of a roll's output -> the same of each of its shifts (``-1``
            is a shift like any other there).
        reads: ``(grad_fn, output_nr, tensor, dim)`` of every size the code read; ``dim``
            None when it read them all (``x.shape``).
        untracked_sized: grad_fn of an op with an operand autograd does not track that is
            a tensor of more than one element (not a scalar): one the code built with a
            size of its own.
        norm_shapes: grad_fn of an ``F.layer_norm`` output -> the ``normalized_shape``
            object the code passed (a layer's own attribute follows its pruning).
        detached: ``(grad_fn, output_nr, tensor, None)`` of every operand with autograd
            history of a call that returned tensors without any (``detach``, ``.data``,
            an op under ``no_grad``, a comparison): the walk cannot see what the call
            did with its channels (a mean over them), so its groups are checked.
        param_reads: the leaves requiring grad (the model's parameters and float
            buffers) whose values the code used outside autograd: a value computed from
            one without autograd history (``detach``, ``.data``, an op under ``no_grad``)
            reached a tracked op or a Python number.  No node records that read, so no
            rule sees its channels.
        param_operands: grad_fn of a tracked op with an operand of more than one
            element computed so -> the leaves it was computed from: the op combines
            their values with its channels, and no rule sees them lined up.
        function_reads: grad_fn of a custom ``autograd.Function``'s output -> the leaves
            its forward (which runs without autograd) computed that output from, found
            where the output reaches a torch call, a Python number or a model output.
            Its node records only the tensors passed to ``apply``, so no rule sees the
            others (a parameter read from a module or a closure).
        created: every grad_fn seen, each once, in the order the forward created them.

    Example:
        >>> x = torch.randn(2, 8, requires_grad=True) * 1
        >>> with SizeWatch() as watch:
        ...     y, z = x.view(2, 2, 4), x.view(x.size(0), -1)
        ...     _ = y + 1  # computed and dropped
        >>> watch.requested[y.grad_fn], watch.requested[z.grad_fn]
        ((2, 2, 4), (2, -1))
        >>> watch.own_sizes[y.grad_fn], watch.own_sizes[z.grad_fn]
        ((True, True, True), (False, False))
        >>> [dim for *_, dim in watch.reads]
        [0]
        >>> [node.name() for node in watch.created]
        ['ViewBackward0', 'ViewBackward0', 'AddBackward0']
        >>> with SizeWatch() as watch:
        ...     _ = x.detach().mean(1)
        >>> [tensor is x for _, _, tensor, _ in watch.detached]
        [True]
        >>> alpha = torch.ones(8, requires_grad=True)
        >>> with SizeWatch() as watch:
        ...     y = x * alpha.detach()
        >>> [t is alpha for t in watch.param_reads.values()], y.grad_fn in watch.param_operands
        ([True], True)
    """

    def __init__(self):
        super().__init__()
        self.requested: Dict[Any, Any] = {}
        self.own_sizes: Dict[Any, Tuple[bool, ...]] = {}
        self.reads: List[Tuple[Any, int, torch.Tensor, Optional[int]]] = []
        self.untracked_sized: Dict[Any, bool] = {}
        self.norm_shapes: Dict[Any, Any] = {}
        self.detached: List[Tuple[Any, int, torch.Tensor, Optional[int]]] = []
        self.param_reads: Leaves = {}
        self.param_operands: Dict[Any, Leaves] = {}
        self.function_reads: Dict[Any, Leaves] = {}
        #: tensor without autograd history -> the leaves requiring grad it was computed from
        self._origins = WeakIdKeyDictionary()
        self._created: Dict[Any, None] = {}

    @property
    def created(self) -> List[Any]:
        return list(self._created)

    def seen(self, node) -> bool:
        """Whether a torch call of the forward returned ``node``'s output."""
        return node in self._created

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        outs = [t for t in (out if isinstance(out, (tuple, list)) else (out, ))
                if isinstance(t, torch.Tensor)]
        for tensor in outs:
            if tensor.grad_fn is not None and tensor.grad_fn not in self._created:
                self._created[tensor.grad_fn] = None
                self._note_operands(tensor.grad_fn, args, kwargs)
        if outs and not any(t.requires_grad for t in outs) and func not in _SHAPE_ONLY:
            self._note_detached(func, args, kwargs, outs)
        elif outs and self._origins:
            self._note_param_operands(func, args, kwargs, outs)
        elif func in _TO_PYTHON:
            self._note_python_value(args[0])
        if func in _ROLLS:
            self._note_shifts(out, args, kwargs)
        kind = _WATCHED.get(func)
        if kind is None or not args or not isinstance(args[0], torch.Tensor):
            if func is F.layer_norm and isinstance(out, torch.Tensor):
                self.norm_shapes[out.grad_fn] = args[1] if len(args) > 1 else \
                    kwargs.get('normalized_shape')
            return out
        if kind == 'internal':
            self._note_internal_views(out, args)
        elif kind == 'read':
            dim = (args[1] if len(args) > 1 else kwargs.get('dim')) if func is \
                torch.Tensor.size else (0 if func is torch.Tensor.__len__ else None)
            x = args[0]
            self.reads.append((x.grad_fn, x.output_nr, x, dim))
            return _as_read(out)
        else:
            request = kind if kind == COMPUTED else _requested_sizes(args[1:], kwargs)
            for tensor in (out if isinstance(out, (tuple, list)) else (out, )):
                if isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None:
                    self._note_request(tensor.grad_fn, request)
        return out

    def _note_request(self, node, request: Any) -> None:
        """Note the sizes a call asked for (plain ints, or :data:`COMPUTED`) and which of
        them the code gave as numbers of its own."""
        if isinstance(request, tuple):
            self.own_sizes[node] = tuple(type(s) is int and s != -1 for s in request)
            request = tuple(int(s) for s in request)
        self.requested[node] = request

    def _note_shifts(self, out: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
        """Note which of a roll's shifts the code gave as numbers of its own (plain ints,
        not computed from a size it read): only those stay the same in the slim model."""
        shifts = args[1] if len(args) > 1 else kwargs.get('shifts')
        if isinstance(out, torch.Tensor) and out.grad_fn is not None:
            self.own_sizes[out.grad_fn] = tuple(
                type(s) is int for s in (shifts if isinstance(shifts, (tuple, list))
                                         else (shifts, )))

    def _note_internal_views(self, out: Any, args: Sequence[Any]) -> None:
        """Mark the nodes a builtin made between its operands and its output as sized
        by torch."""
        stop = {t.grad_fn for t in args if isinstance(t, torch.Tensor)}
        stack = [out.grad_fn] if isinstance(out, torch.Tensor) else []
        while stack:
            node = stack.pop()
            if node is None or node in stop or node in self.requested:
                continue
            self.requested[node] = COMPUTED
            stack.extend(child for child, _ in node.next_functions)

    def _note_detached(self, func, args: Sequence[Any], kwargs: Dict[str, Any],
                       outs: Sequence[torch.Tensor]) -> None:
        """Note the operands with autograd history of a call whose results have none, and
        which leaves requiring grad its results are computed from (a parameter read by
        ``detach``, ``.data`` or under ``no_grad``, and what was computed from one so)."""
        origins: Leaves = {}
        for position, tensor in _operands(args, kwargs):
            if tensor.grad_fn is not None:
                self.detached.append((tensor.grad_fn, tensor.output_nr, tensor, None))
                self._note_carried(tensor)
            elif not tensor.requires_grad:
                origins.update(self._origins.get(tensor, {}))
            elif position == 0 or func not in _TYPE_ONLY:
                origins[id(tensor)] = tensor
        if origins:
            for tensor in outs:
                self._origins[tensor] = {**self._origins.get(tensor, {}), **origins}

    def _note_python_value(self, tensor: Any) -> None:
        """Note the leaves requiring grad whose values became Python numbers: a parameter
        itself (``self.alpha.tolist()``) or what was computed from one outside autograd."""
        if not isinstance(tensor, torch.Tensor):
            return
        if tensor.requires_grad and tensor.grad_fn is None:
            self.param_reads[id(tensor)] = tensor
        else:
            self._note_carried(tensor)

    def note_outputs(self, outputs: Sequence[torch.Tensor]) -> None:
        """Note the leaves the model's outputs were computed from outside autograd: the
        caller reads their values, which no node records (``(logits,
        self.alpha.detach())`` would return fewer entries once ``alpha`` is sliced)."""
        for tensor in outputs:
            self._note_carried(tensor)

    def _note_carried(self, tensor: torch.Tensor) -> None:
        """Note the leaves whose values ``tensor`` was computed from outside autograd as
        read: by its custom ``autograd.Function`` if it has joined the graph as the
        output of one (:attr:`function_reads`), else by the code."""
        origins = self._origins.get(tensor)
        if not origins:
            return
        node = tensor.grad_fn
        if isinstance(node, BackwardCFunction):
            self.function_reads.setdefault(node, {}).update(origins)
        else:
            self.param_reads.update(origins)

    def _note_param_operands(self, func, args: Sequence[Any], kwargs: Dict[str, Any],
                             outs: Sequence[torch.Tensor]) -> None:
        """Note the leaves requiring grad that the operands without autograd history of a
        tracked call were computed from, and that the call combines them with its
        channels, unless such an operand is only the data a weight is applied to (a
        layer's input computed by a frozen backbone under ``no_grad``: the output's
        channels are the layer's own).  An operand with autograd history may still be
        computed so: the output of a custom ``autograd.Function``."""
        read: Leaves = {}
        combined: Leaves = {}
        for position, tensor in _operands(args, kwargs):
            if tensor.requires_grad:  # tracked, unless a custom Function computed it
                self._note_carried(tensor)
                continue
            origins = self._origins.get(tensor, {})
            read.update(origins)
            if tensor.numel() > 1 and not (position == 0 and func in _DATA_FIRST):
                combined.update(origins)
        self.param_reads.update(read)
        if combined:
            for tensor in outs:
                if tensor.grad_fn is not None:
                    self.param_operands.setdefault(tensor.grad_fn, {}).update(combined)

    def _note_operands(self, node, args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
        """Note ``node`` if an operand autograd does not track is more than a scalar."""
        if any(_untracked_sized(t) for _, t in _operands(args, kwargs)):
            self.untracked_sized[node] = True


def _operands(args: Sequence[Any], kwargs: Dict[str, Any]) -> Iterator[Tuple[int, torch.Tensor]]:
    """Every tensor among a call's arguments (and in a tuple or list of them), with the
    position of the argument that holds it."""
    for position, arg in enumerate(itertools.chain(args, kwargs.values())):
        for tensor in arg if type(arg) in (tuple, list) else (arg, ):
            if isinstance(tensor, torch.Tensor):
                yield position, tensor


def _untracked_sized(t: torch.Tensor) -> bool:
    return not t.requires_grad and t.numel() > 1


def _follows_channels(request: Any, out: Optional[TensorChannels]) -> bool:
    """Whether a call's requested sizes leave every channel-carrying dim to torch."""
    if request == COMPUTED:
        return True
    if request is None:
        return False
    if out is None or not out.slots:
        return True
    return len(request) == out.ndim and all(request[d] == -1 for d in out.slots)


def _owned_by_layer(ctx: TraceContext, node, watch: SizeWatch) -> bool:
    """Whether a norm's sizes come from a layer that slicing updates: the module that
    returns it has a kind, or the kind of the module owning its weight claims it and the
    code passed that module's own ``normalized_shape`` (``LayerNorm2d`` permuting around
    ``F.layer_norm``)."""
    if ctx.layer_kind(ctx.module_of_node(node)) is not None:
        return True
    found = find_layer(ctx, node)
    if found is None:
        return False
    if node.name() == 'NativeLayerNormBackward0':
        return watch.norm_shapes.get(node, node) is getattr(found[1], 'normalized_shape', None)
    # a batch norm takes its sizes from its tensors; a group norm's group count is the code's
    return 'BatchNorm' in node.name()


def _node_is_sized_by_code(ctx: TraceContext, node, watch: SizeWatch,
                           channels: Channels) -> bool:
    rule = rule_for(node.name())
    if rule.sizes == 'code':
        return not _follows_channels(watch.requested.get(node), channels.get((node, 0)))
    if rule.sizes == 'module':
        return not _owned_by_layer(ctx, node, watch)
    if rule.sizes == 'shifts':
        out = channels.get((node, 0))
        return out is not None and not set(out.slots).isdisjoint(moved_dims(node, out.ndim))
    if rule.kind == 'pass':  # masked_fill's mask, a tensor bound of clamp
        return node in watch.untracked_sized
    if rule.kind not in ('bind', 'concat'):
        return False
    if watch.seen(node):  # the call's operands were looked at
        return node in watch.untracked_sized
    return any(child is None for child, _ in node.next_functions)


def _node_slots(ctx: TraceContext, node, channels: Channels) -> List[np.ndarray]:
    found = [_traced(ctx, channels, child, nr) for child, nr in node.next_functions
             if child is not None]
    found += [channels.get((node, nr)) for nr in range(len(node._input_metadata))]
    return [tc.all_slots() for tc in found if tc is not None and tc.slots]


def _read_slots(ctx: TraceContext, reads, channels: Channels) -> List[np.ndarray]:
    out = []
    for node, nr, tensor, dim in reads:
        tc = channels.get((node, nr)) if node is not None else \
            ctx.traced_leaf_channels(tensor)
        if tc is None or not tc.slots:
            continue
        if dim is None:
            out.append(tc.all_slots())
        elif normalize_dim(dim, tc.ndim) in tc.slots:
            out.append(tc.slots[normalize_dim(dim, tc.ndim)])
    return out


def size_dependent_slots(ctx: TraceContext, order: Sequence[Any], watch: SizeWatch,
                         channels: Channels) -> np.ndarray:
    """Slots whose pruning the model's code might not follow (see the module docstring)."""
    found = _read_slots(ctx, watch.reads + watch.detached, channels)
    for node in order:
        if getattr(node, 'variable', None) is None and \
                _node_is_sized_by_code(ctx, node, watch, channels):
            found += _node_slots(ctx, node, channels)
    return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


#: Where the code read a parameter that :func:`freeze_untracked_params` freezes.
OUTSIDE_AUTOGRAD = 'outside autograd (detach, .data, torch.no_grad, as Python numbers)'


def freeze_untracked_params(ctx: TraceContext, watch: SizeWatch, channels: Channels) -> None:
    """Freeze the channels an op combines with a parameter the code read outside
    autograd (:attr:`SizeWatch.param_operands`), and the channels of every parameter it
    read so (:attr:`SizeWatch.param_reads`).

    No node records such a read, so no rule lines the parameter up with the channels it
    meets (``x * self.alpha.detach().view(1, -1, 1, 1)``: the slim ``x`` would meet the
    whole ``alpha``), and a parameter sliced with a group is still read whole where the
    code read it so (``self.alpha.detach().sum()``: the slim model would sum fewer
    entries).  Rotary ``inv_freq`` buffers, read under ``no_grad`` by design, are bound by
    their own rule (:func:`.heads.bind_rotary`).
    """
    for node, leaves in watch.param_operands.items():
        names = ', '.join(filter(None, (_param_name(ctx, t) for t in leaves.values())))
        slots = _node_slots(ctx, node, channels)
        if names and slots:
            ctx.freeze(np.concatenate(slots), 'untracked', node,
                       f'combines these channels with {names}, read {OUTSIDE_AUTOGRAD}: '
                       'its entries cannot follow their pruning')
    for tensor in watch.param_reads.values():
        for name, slots in _own_slots(ctx, tensor):
            ctx.freeze(slots, 'untracked', None, f'the code reads it {OUTSIDE_AUTOGRAD}, '
                       'where its pruning cannot follow', op=name)


def freeze_params_of_opaque_ops(ctx: TraceContext, order: Sequence[Any],
                                watch: SizeWatch) -> None:
    """Freeze the parameters an op reads where no rule follows them: the inputs of an op
    missing from the rule table, and what a custom ``autograd.Function``'s forward read
    besides its inputs (:attr:`SizeWatch.function_reads`).

    Freezing the channels that reach such an op is not enough: a parameter sliced with
    a group elsewhere (a layer's weight, ``x * self.alpha[:, None, None]``) would reach it
    sliced in the slim model, which then computes something else
    (``Fn.apply(x, self.alpha)`` of ``x * alpha.sum()``) or fails.
    """
    for node in order:
        if getattr(node, 'variable', None) is None and rule_for(node.name()) is UNKNOWN:
            for leaf in _leaf_inputs(node):
                _freeze_read(ctx, leaf, 'unknown-op', node, 'this grad_fn is not in the '
                             'channel rule table and reads {}: its entries cannot follow '
                             'their pruning')
    for node, leaves in watch.function_reads.items():
        inputs = {id(leaf) for leaf in _leaf_inputs(node)}
        for key, leaf in leaves.items():
            if key not in inputs:  # an input is its rule's to follow
                _freeze_read(ctx, leaf, 'untracked', node, 'this custom autograd.Function '
                             'computes its output from {} in its forward, where no rule '
                             'sees it: its entries cannot follow their pruning')


def _leaf_inputs(node) -> List[torch.Tensor]:
    """The parameters and buffers requiring grad among a node's inputs."""
    return [child.variable for child, _ in node.next_functions
            if getattr(child, 'variable', None) is not None]


def _freeze_read(ctx: TraceContext, tensor: torch.Tensor, kind: str, node,
                 message: str) -> None:
    """Freeze each name's channels of a parameter ``node`` reads, with ``message``
    formatted with the name."""
    for name, slots in _own_slots(ctx, tensor):
        ctx.freeze(slots, kind, node, message.format(name))


def _param_name(ctx: TraceContext, tensor: torch.Tensor) -> Optional[str]:
    """The name of a parameter or buffer of the model; None for anything else and for a
    rotary buffer."""
    found = ctx.owner(tensor)
    return None if found is None or found[1] in ROTARY_BUFFERS else ctx.tensor_name(tensor)


def _own_slots(ctx: TraceContext, tensor: torch.Tensor) -> List[Tuple[str, np.ndarray]]:
    """``(name, slots)`` of each name of a parameter or buffer: a layer's weight has the
    channels of its layer's axes, a bare one those of its own dims (none if no rule bound
    it to a group: it is then never sliced)."""
    found = []
    for module, attr in ctx.owners_of(tensor):
        if attr in ROTARY_BUFFERS:
            continue
        name = f'{module}.{attr}' if module else attr
        owner = module if ctx.layer_kind(module) is not None else name
        slots = [use.slots for use in ctx.uses.values() if use.name == owner]
        if slots:
            found.append((name, np.concatenate(slots)))
    return found
