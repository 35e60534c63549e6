"""FLOPs and parameter counts that know masked supernets and slimmed subnets.

Every module with a :class:`~razorlib.layers.LayerKind` is counted by its kind, at the
widths its ``in_mask``/``out_mask`` keep; a bare parameter (layer scale, position
embedding) at the entries its keep-masks keep.  So a supernet set to a subnet reports
exactly what the sliced subnet has: parameters as ``sum(p.numel())`` of the slim model.

FLOPs are multiply-accumulates of conv, transposed conv and linear layers (and attention
projections) plus one operation per normalised element: OpenMMLab's convention.  Weight
layers run as functions outside their modules' calls are counted too (see
:class:`_FunctionCounter`; ``nn.Bilinear``'s ``F.bilinear`` among them), and so are the
weight products of recurrent layers (see :func:`recurrent_macs`).  The products of two
activations (``QK^T``, ``AV`` in attention) are left out unless ``attention=True``.
"""
from dataclasses import dataclass
import inspect
import math
import string
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import PackedSequence
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from ..layers import (IN_MASK, OUT_MASK, KindTable, LayerKind, LayerKindsArg, as_table,
                      kept_param_size, kept_widths, param_mask_name)
from ..tracing.forward import call_model, default_example_inputs, shadow_tensors, shadowed
from .kept_rows import (BROADCASTS, JOINS, OTHER_MOVES, PERMUTES, RESHAPES, ROLLS, SHUFFLES,
                        SPLITS, Rows, first_operand, indexed_rows, joined_rows, permuted_rows,
                        reshaped_rows, rolled_rows, shuffled_rows, split_rows)
from .modes import evaluating

__all__ = ['Complexity', 'count_params', 'get_model_complexity', 'human']


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


def _bare_param_size(module: nn.Module, attr: str, tensor: torch.Tensor) -> int:
    kept = {}
    for dim in range(tensor.dim()):
        mask = module._buffers.get(param_mask_name(attr, dim))
        if mask is not None:
            kept[dim] = int(mask.count_nonzero())
    return kept_param_size(tensor, kept)


def _computed_weight(module: nn.Module) -> bool:
    """Whether the module's ``weight`` is computed rather than held: a parametrization
    (``parametrizations.weight_norm``) or the old ``weight_norm`` hook's plain tensor."""
    weight = getattr(module, 'weight', None)
    return isinstance(weight, torch.Tensor) and not isinstance(weight, nn.Parameter)


def _kept_size(name: str, module: nn.Module, kind: LayerKind, attr: str) -> int:
    """The entries of ``module``'s parameter ``attr`` that its masks keep: the size its
    kind's slice plan gives it (planned on shape-only stand-ins, copying no weight); its
    whole size where no mask cuts the module or the kind does not slice the parameter."""
    tensor = module._parameters[attr]
    kept = {axis: module._buffers[mask].flatten().nonzero().flatten().tolist()
            for axis, mask in (('in', IN_MASK), ('out', OUT_MASK))
            if module._buffers.get(mask) is not None}
    if not kept:
        return tensor.numel()
    with shadowed(module, shadow_tensors(module, meta=True)):
        sliced = kind.plan_slice(name, module, kept).params.get(attr)
    return tensor.numel() if sliced is None else sliced.numel()


def count_params(model: nn.Module, layer_kinds: LayerKindsArg = None) -> int:
    """Parameters, each layer counted by its kind at its kept widths and each bare
    parameter at its kept entries.

    A layer whose weight is computed (weight or spectral norm) counts the parameters it
    holds.

    Example:
        >>> count_params(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)))
        240
        >>> from torch.nn.utils.parametrizations import weight_norm
        >>> count_params(weight_norm(nn.Conv2d(3, 8, 3)))  # 216 + 8 + the norms' 8
        232
    """
    kinds = as_table(layer_kinds)
    total, seen = 0, set()
    for name, module in model.named_modules():
        kind = kinds.kind_of(module)
        if kind is not None and _computed_weight(module):
            # weight_norm, spectral_norm: the weight is computed from parameters of other
            # shapes, and such layers are never pruned, so count what they hold
            total += sum(p.numel() for p in module.parameters() if id(p) not in seen)
            seen.update(id(p) for p in module.parameters())
            continue
        if kind is not None:
            own = {attr: p for attr, p in module._parameters.items() if p is not None}
            tied = [attr for attr, p in own.items() if id(p) in seen]
            seen.update(id(p) for p in own.values())
            if own and len(tied) == len(own):
                continue  # all counted before (lm_head tied to the embeddings)
            # parameters the kind does not know (a Conv2d subclass's learned gain, as in
            # timm's ScaledStdConv2d) are held whole, pruned or not
            total += max(0, sum(p.numel() for p in own.values()) - kind.params(module, {}))
            # a tied weight beside parameters of the module's own (lm_head with a bias, a
            # conv sharing another's weight) counted at its first owner: not again here
            total += kind.params(module, kept_widths(module, kind.widths(module))) - \
                sum(_kept_size(name, module, kind, attr) for attr in tied)
            continue
        for attr, param in module._parameters.items():
            if param is not None and id(param) not in seen:
                total += _bare_param_size(module, attr, param)
                seen.add(id(param))
    return total


#: Weight layers as functions: what a kind's module runs, or code runs on a weight ->
#: the position of the weight among the arguments.  ``F.bilinear`` (``nn.Bilinear``'s op;
#: the module has no kind, so the tracer freezes the channels around it) takes it third.
_LINEAR, _CONVS, _TRANSPOSED = (F.linear, ), (F.conv1d, F.conv2d, F.conv3d), \
    (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)
_WEIGHT_FUNCTIONS = {**dict.fromkeys(_LINEAR + _CONVS + _TRANSPOSED, 1), F.bilinear: 2}
#: Products of two operands: ``(a, b)`` are the first two arguments, or the 2nd and 3rd
#: after an added ``input`` (``addmm``, ``baddbmm``).
_PRODUCTS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm,
             torch.Tensor.mm, torch.bmm, torch.Tensor.bmm)
_ADDED_PRODUCTS = (torch.addmm, torch.Tensor.addmm, torch.baddbmm, torch.Tensor.baddbmm,
                   torch.addbmm, torch.Tensor.addbmm)


def _grouped_functions() -> frozenset:
    """The grouped products of mixture-of-experts layers present: ``(S, K)`` tokens sorted
    by expert times ``(E, K, N)`` expert weights (``offs`` says which rows go to which
    expert), as torch runs them for transformers' default experts, and transformers'
    fallback op of the same contract once its module registered it (the mode sees the
    op's packet or its default overload)."""
    found = [getattr(torch, '_grouped_mm', None), getattr(F, 'grouped_mm', None)]
    fallback = getattr(getattr(torch.ops, 'transformers', None), 'grouped_mm_fallback', None)
    if fallback is not None:
        found += [fallback, fallback.default]
    return frozenset(f for f in found if f is not None)


def grouped_macs(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> int:
    """Multiply-accumulates of a grouped product: each row of ``a`` meets one group's
    matrix of ``b``, so each output entry costs one row of ``a`` (``a.shape[-1]``); where
    both are 2-D the groups split the summed dim instead, and the total is one plain
    product's.

    Example:
        >>> tokens, experts = torch.randn(32, 64), torch.randn(4, 64, 128)
        >>> grouped_macs(tokens, experts, torch.empty(32, 128)) == 32 * 64 * 128
        True
    """
    if a.dim() == 2 and b.dim() == 2:
        return a.shape[0] * a.shape[1] * b.shape[1]
    return out.numel() * a.shape[-1]


def einsum_subscripts(equation: str,
                      operands: Sequence[torch.Tensor]) -> Tuple[List[str], str]:
    """The index letters of each operand's dims and of the output of an ``einsum``: ``...``
    spelled out as letters of its own (aligned from the right, as broadcasting aligns
    dims), an implicit output made explicit (the ``...`` dims, then the letters that occur
    once, in alphabetical order, as torch orders them).

    Example:
        >>> einsum_subscripts('...qd,...kd', (torch.randn(2, 3, 5, 4), torch.randn(3, 6, 4)))
        (['ABqd', 'Bkd'], 'ABkq')
    """
    equation = equation.replace(' ', '')
    inputs, arrow, output = equation.partition('->')
    subscripts = inputs.split(',')
    spans = [operand.dim() - len(subscript) + 3 if '...' in subscript else 0
             for subscript, operand in zip(subscripts, operands)]
    spare = [c for c in string.ascii_uppercase + string.ascii_lowercase if c not in equation]
    dots = ''.join(spare[:max(spans, default=0)])
    if not arrow:
        once = sorted(c for c in set(inputs) if c.isalpha() and inputs.count(c) == 1)
        output = '...' + ''.join(once)
    return ([subscript.replace('...', dots[len(dots) - span:])
             for subscript, span in zip(subscripts, spans)], output.replace('...', dots))


def einsum_macs(equation: str, operands: Sequence[torch.Tensor], output: torch.Tensor) -> int:
    """Multiply-accumulates of an ``einsum``: each output entry sums the product of its
    operands over every index that the output does not keep.

    Example:
        >>> q, k = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4)
        >>> einsum_macs('bhqd,bhkd->bhqk', (q, k), torch.einsum('bhqd,bhkd->bhqk', q, k))
        720
    """
    subscripts, kept = einsum_subscripts(equation, operands)
    sizes: Dict[str, int] = {}
    for subscript, operand in zip(subscripts, operands):
        for letter, size in zip(subscript, operand.shape):
            sizes[letter] = max(size, sizes.get(letter, 1))  # a broadcast dim is 1
    return output.numel() * math.prod(size for letter, size in sizes.items()
                                      if letter not in kept)


def _weight_macs(func, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> int:
    """Dense multiply-accumulates of ``F.linear`` / ``F.conv*`` / ``F.conv_transpose*`` /
    ``F.bilinear`` on ``x`` with ``weight``: every output (input, transposed) entry reads
    one weight row (a bilinear output entry one ``in1 x in2`` matrix, so ``nn.Bilinear``
    costs ``tokens * in1 * in2 * out``, as a Linear costs ``tokens * in * out``)."""
    per_row = weight[0].numel()
    return (x.numel() if func in _TRANSPOSED else out.numel()) * per_row


#: Recurrent layers: they have no layer kind (the tracer freezes the channels around
#: them, so they stay whole), and the mode does not see their products (one ATen op).
_RECURRENT = (nn.RNNBase, nn.RNNCellBase)


def recurrent_macs(module: nn.Module, sequence: Any) -> int:
    """Multiply-accumulates of an ``nn.RNN`` / ``nn.LSTM`` / ``nn.GRU`` or one of their
    cells on ``sequence`` (a tensor, batch first or not, or a ``PackedSequence``).

    Every weight matrix multiplies one vector per token it reads: per token, layer and
    direction, the input-to-hidden and hidden-to-hidden products of all gates, and an
    LSTM's ``proj_size`` projection.  That is what the same layer built from
    ``nn.Linear`` counts (``torch.ao.nn.quantizable.LSTM`` is built so).  Bias adds and
    the gates' element-wise ops are left out, as a Linear's bias and activations are.
    A packed sequence costs the tokens it holds, not its padded length.

    Example:
        >>> lstm = nn.LSTM(8, 16, batch_first=True)  # 4 gates: 64 x 8 and 64 x 16 weights
        >>> recurrent_macs(lstm, torch.randn(2, 5, 8)) == 2 * 5 * (64 * 8 + 64 * 16)
        True
    """
    data = sequence.data if isinstance(sequence, PackedSequence) else sequence
    # by name, not module._parameters: a weight under weight_norm is computed, not held
    names = getattr(module, '_flat_weights_names', ('weight_ih', 'weight_hh'))
    per_token = sum(_bare_param_size(module, name, getattr(module, name))
                    for name in names if name.startswith('weight'))
    return data.numel() // data.shape[-1] * per_token


def _product_operands(func, args: tuple) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    operands = args[:2] if func in _PRODUCTS else args[1:3] if func in _ADDED_PRODUCTS else ()
    if len(operands) == 2 and all(isinstance(t, torch.Tensor) for t in operands):
        return operands[0], operands[1]
    return None


def _product_equation(func, a: torch.Tensor, b: torch.Tensor) -> str:
    """A matrix product (``matmul``, ``mm``, ``bmm`` and their adding forms) as an
    ``einsum`` equation: ``k`` summed, the batch dims broadcast (``addbmm`` sums them too),
    a 1-D operand a vector.

    Example:
        >>> _product_equation(torch.matmul, torch.randn(2, 3, 5, 4), torch.randn(4))
        '...mk,k->...m'
    """
    first, second = ('k' if a.dim() == 1 else '...mk'), ('k' if b.dim() == 1 else '...kn')
    batch = '' if func in (torch.addbmm, torch.Tensor.addbmm) else '...'
    return f'{first},{second}->{batch}{"m" * (a.dim() > 1)}{"n" * (b.dim() > 1)}'


#: ``F.scaled_dot_product_attention(q, k, v)`` as an ``einsum`` equation: ``QK^T`` sums
#: over ``e``, ``AV`` over ``s``.
_ATTENTION_EQUATION = '...le,...se,...sv->...lv'


class _FunctionCounter(TorchFunctionMode):
    """Counts the multiply-accumulates that module hooks cannot see.

    - Weight layers run as functions outside their module's call: ``F.linear`` on a
      Linear's weight (torchvision's Swin runs its ``qkv`` so), ``conv.forward(x)``,
      ``x @ parameter``, an ``einsum`` with a parameter, ``nn.Bilinear``'s
      ``F.bilinear``, at the share of the weight that is kept.  Calls made inside a
      kind's module (its hooks count those) are not.
    - With ``attention``, products of two activations: ``matmul``, ``bmm``, ``@``,
      ``baddbmm``, ``einsum``, ``scaled_dot_product_attention`` and
      ``nn.MultiheadAttention``'s ``F.multi_head_attention_forward`` (whose inner
      products the mode does not see).

    It also follows the channels a masked layer's out mask cuts (:data:`Rows`) from the
    layer's output through views, permutes, channel shuffles, broadcasts, indexing by
    ints and slices, splits (``chunk``, ``split``, ``unbind``, ``hsplit``: each piece its
    slice), joins (``cat``, ``stack``: the pieces' keeps end to end), products (each
    index of the output keeps its operands') and ops that keep the shape,
    so that a layer whose input holds them on dims its own masks do not cover (its rows)
    counts only the rows the slim model has (:meth:`kept_share`), and a product of
    activations only the entries it has (:meth:`_kept_macs`: attention over pruned
    heads).
    """

    def __init__(self, model: nn.Module, kinds: KindTable, attention: bool) -> None:
        super().__init__()
        self.attention, self.depth = attention, 0
        self.flops: Dict[str, int] = {}
        #: rows picked from a parameter (``experts.down_proj[expert_ids]``, transformers'
        #: ``batched_mm`` experts) -> the parameter: a product with them is a weight's
        self.picked = WeakIdKeyDictionary()
        self.grouped = _grouped_functions()  # one set lookup per op on this hot path
        #: ops whose output dims are not their operands' (rows are not carried through)
        self.unfollowed = self.grouped | OTHER_MOVES | frozenset(_WEIGHT_FUNCTIONS)
        #: tensor -> its :data:`Rows`, for tensors that hold channels a mask cuts
        self.rows = WeakIdKeyDictionary()
        self._out_keeps: Dict[int, Optional[np.ndarray]] = {}
        self.owners: Dict[int, tuple] = {}
        for name, module in model.named_modules():
            kind = kinds.kind_of(module)
            for attr, param in module._parameters.items():
                if param is not None and id(param) not in self.owners:
                    self.owners[id(param)] = (name, module, kind, attr)

    def _add(self, key: str, macs: float) -> None:
        self.flops[key] = self.flops.get(key, 0) + int(round(macs))

    def _parameter(self, tensor: Any) -> Optional[nn.Parameter]:
        """The parameter ``tensor`` is, is a view of (``x @ self.weight.T``, a transposed
        expert stack), or whose rows it was picked from; else None."""
        if isinstance(tensor, nn.Parameter):
            return tensor
        if not isinstance(tensor, torch.Tensor):
            return None
        base = tensor if tensor._base is None else tensor._base
        return base if isinstance(base, nn.Parameter) else self.picked.get(base)

    def _weight_op(self, weight: Any, dense: int) -> None:
        """Count a product with ``weight``: under its module's name at the share of the
        weight that its kept widths (a kind's module) or entries (a bare parameter) keep:
        a pruned layer's weight run by the model's code (a tied decoder's ``z @ enc.weight``)
        counts what the slim model's sliced weight costs."""
        weight = self._parameter(weight)
        owner = None if weight is None else self.owners.get(id(weight))
        if owner is None:
            self._add('<functional>', dense)
            return
        name, module, kind, attr = owner
        if kind is not None:
            # the kept share of this weight, not of the whole layer's parameters: a bias
            # (kept with the outputs alone) would skew it
            self._add(name, dense * _kept_size(name, module, kind, attr)
                      / max(weight.numel(), 1))
        else:
            self._add('<functional>', dense * _bare_param_size(module, attr, weight)
                      / max(weight.numel(), 1))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        indexed = None  # a product's (einsum equation, operands)
        if func is torch.Tensor.__getitem__:
            if isinstance(args[0], nn.Parameter) and isinstance(out, torch.Tensor):
                self.picked[out] = args[0]
        elif func in _WEIGHT_FUNCTIONS:
            index = _WEIGHT_FUNCTIONS[func]
            if not self.depth and len(args) > index:
                self._weight_op(args[index], _weight_macs(func, args[0], args[index], out))
        elif func is torch.einsum:
            operands = args[1] if len(args) == 2 and isinstance(args[1], (list, tuple)) \
                else args[1:]
            params = [t for t in operands if self._parameter(t) is not None]
            macs = einsum_macs(args[0], operands, out)
            indexed = (args[0], operands)
            if params and not self.depth:
                self._weight_op(params[0], macs)
            elif not params and self.attention:
                self._add('<attention>', self._kept_macs(macs, indexed))
        elif func in self.grouped and len(args) >= 2:
            weight = self._parameter(args[1])
            if weight is not None and not self.depth:
                self._weight_op(weight, grouped_macs(args[0], args[1], out))
            elif weight is None and self.attention:
                self._add('<attention>', grouped_macs(args[0], args[1], out))
        elif (operands := _product_operands(func, args)) is not None:
            a, b = operands
            macs = a.numel() * b.shape[-1] if func not in _PRODUCTS[:3] else \
                out.numel() * a.shape[-1]
            params = [t for t in operands if self._parameter(t) is not None]
            if self.rows:  # what the kept rows need; none on a model without cuts
                indexed = (_product_equation(func, a, b), operands)
            if params and not self.depth:
                self._weight_op(params[0], macs)
            elif not params and self.attention:
                self._add('<attention>', self._kept_macs(macs, indexed))
        elif func is F.scaled_dot_product_attention:
            q, k, v = (tuple(args[:3]) + tuple(kwargs[name] for name in
                                               ('query', 'key', 'value')[len(args):]))
            indexed = (_ATTENTION_EQUATION, (q, k, v))
            if self.attention:
                scores = q.numel() // q.shape[-1] * k.shape[-2]
                self._add('<attention>', self._kept_macs(scores * q.shape[-1], indexed, 'v') +
                          self._kept_macs(scores * v.shape[-1], indexed, 'e'))
        elif func is F.multi_head_attention_forward and self.attention:  # (L, N, E)
            q, k = args[:2]
            self._add('<attention>', 2 * q.numel() * k.shape[0])
        if self.rows and isinstance(out, torch.Tensor):
            self._carry_rows(func, args, kwargs, out, indexed)
        elif self.rows and func in SPLITS and \
                isinstance(x := first_operand(args, kwargs), torch.Tensor) and x in self.rows:
            for piece, rows in zip(out, split_rows(func, args, kwargs, self.rows[x], out)):
                if rows:
                    self.rows[piece] = rows
        return out

    def _letter_rows(self, equation: str,
                     operands: Sequence[torch.Tensor]) -> Dict[str, np.ndarray]:
        """The keep of each index of a product (its ``einsum`` letter) that an operand's
        :data:`Rows` cut: the one that keeps the smallest share where several do (the
        query heads a grouped-query attention prunes beside its whole key/value heads; an
        operand whose rows were lost on the way has none)."""
        found: Dict[str, np.ndarray] = {}
        subscripts, _ = einsum_subscripts(equation, operands)
        for operand, letters in zip(operands, subscripts):
            for dim, keep in self.rows.get(operand, {}).items():
                old = found.get(letters[dim])
                if old is None or keep.sum() * old.size < old.sum() * keep.size:
                    found[letters[dim]] = keep
        return found

    def _kept_macs(self, macs: int, indexed: Optional[Tuple[str, Sequence[torch.Tensor]]],
                   skip: str = '') -> int:
        """``macs`` of a product of activations (``indexed``: its einsum equation and
        operands, None where no rows are followed) at the share its operands' :data:`Rows`
        keep: a masked model's attention over pruned heads multiplies their zeros, the
        slim model has only the kept heads.  ``skip``: letters of the equation that the
        part counted does not run over (attention's ``QK^T`` no ``v``, its ``AV`` no
        ``e``)."""
        kept = total = 1
        if self.rows and indexed is not None:
            for letter, keep in self._letter_rows(*indexed).items():
                if letter not in skip:
                    kept, total = kept * int(keep.sum()), total * keep.size
        return macs * kept // total

    def _carry_rows(self, func, args: tuple, kwargs: Dict[str, Any], out: torch.Tensor,
                    indexed: Optional[Tuple[str, Sequence[torch.Tensor]]] = None) -> None:
        """Give ``out`` the :data:`Rows` of its operand (:func:`first_operand`, by position
        or keyword) through a view, permute, roll, broadcast or index by ints and slices, of
        its operands' indices that a product (``indexed``: its einsum equation and operands)
        keeps, of the tensors a cat or stack joins, or of an operand of its shape through
        any other op but a weight layer or another move of dims (whose output dims are not
        its operands')."""
        x = first_operand(args, kwargs)
        rows = self.rows.get(x) if isinstance(x, torch.Tensor) else None
        if indexed is not None:
            letters = self._letter_rows(*indexed)
            found = {dim: letters[letter] for dim, letter
                     in enumerate(einsum_subscripts(*indexed)[1])
                     if letter in letters and letters[letter].size == out.shape[dim]}
        elif func in RESHAPES:
            found = rows and reshaped_rows(rows, x.shape, out.shape)
        elif func is torch.Tensor.__getitem__:
            found = rows and indexed_rows(args[1], rows, x.dim())
        elif func in BROADCASTS:
            found = rows and {dim + out.dim() - x.dim(): keep for dim, keep in rows.items()}
        elif func in PERMUTES:
            found = rows and permuted_rows(func, args, kwargs, rows, x.dim())
        elif func in SHUFFLES:
            found = rows and shuffled_rows(args, kwargs, rows)
        elif func in ROLLS:
            found = rows and rolled_rows(args, kwargs, rows, x.dim())
        elif func in JOINS:
            found = joined_rows(func, args, kwargs, [self.rows.get(t, {}) for t in x], out)
        elif func in self.unfollowed:
            found = None
        else:
            found = next((self.rows[t] for t in (*args, *kwargs.values())
                          if isinstance(t, torch.Tensor) and t.shape == out.shape
                          and t in self.rows), None)
        if found:
            self.rows[out] = found

    def _own_dims(self, module: nn.Module, x: torch.Tensor, output: torch.Tensor) -> set:
        """The dims of ``x`` that ``module``'s own masks cover: its input channels, and
        its output channels where the output has ``x``'s dims (a norm)."""
        own = set()
        in_mask, out_mask = module._buffers.get(IN_MASK), module._buffers.get(OUT_MASK)
        if in_mask is not None:
            own.add(x.dim() - in_mask.dim())
        if out_mask is not None and output.dim() == x.dim():
            own.add(output.dim() - out_mask.dim())
        return own

    def kept_share(self, module: nn.Module, x: Any, output: torch.Tensor) -> Tuple[int, int]:
        """``(kept, all)`` rows of a layer's call on ``x``: over the dims of ``x`` that hold
        a masked layer's channels and that ``module``'s own masks do not cover, the
        product of the entries kept and of all; ``(1, 1)`` where there are none.

        A masked model's norm over such rows (``LayerNorm((H, W))`` under a conv's
        channels, a norm of each head's ``head_dim`` under a projection's heads) has no
        mask of them and normalises the zero rows too; the slim model has only the kept
        rows, so a count scaled by this share is the slim model's.
        """
        rows = self.rows.get(x) if isinstance(x, torch.Tensor) else None
        kept = total = 1
        if rows:
            own = self._own_dims(module, x, output)
            for keep in (keep for dim, keep in rows.items() if dim not in own):
                kept, total = kept * int(keep.sum()), total * keep.size
        return kept, total

    def note_output(self, module: nn.Module, x: Any, output: torch.Tensor) -> None:
        """Give a layer's output its :data:`Rows`: those of its input ``x`` on the dims
        the output keeps, and its own channels where its out mask cuts some."""
        rows: Rows = {}
        found = self.rows.get(x) if isinstance(x, torch.Tensor) else None
        if found and output.dim() == x.dim():
            own = self._own_dims(module, x, output)
            rows = {d: keep for d, keep in found.items()
                    if d not in own and output.shape[d] == x.shape[d]}
        if id(module) not in self._out_keeps:
            mask = module._buffers.get(OUT_MASK)
            keep = None if mask is None else (mask.detach().flatten() != 0).cpu().numpy()
            self._out_keeps[id(module)] = None if keep is None or keep.all() else keep
        keep = self._out_keeps[id(module)]
        if keep is not None:
            dim = output.dim() - module._buffers[OUT_MASK].dim()
            if dim >= 0 and output.shape[dim] == keep.size:
                rows[dim] = keep
        if rows:
            self.rows[output] = rows
        elif output in self.rows:  # what its inner ops carried: the layer's are these
            del self.rows[output]


def _call_inputs(module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> tuple:
    """The arguments of a call of ``module`` in its forward's parameter order: what a
    kind's ``flops`` reads as ``inputs``.  Keyword arguments go to their parameter's
    place and defaults fill the places before them, so ``inputs[i]`` is the forward's
    i-th parameter however the call passed it (``mha(key=kv, value=kv, query=q)`` gives
    ``(q, kv, kv, ...)``); a ``*args`` parameter's values are spread in its place and a
    ``**kwargs`` parameter's go last.  A call that does not fit the signature (a forward
    a decorator wrapped, transformers' ``deprecate_kwarg`` taking an old keyword) places
    the keywords the signature names by name and appends the others in call order.

    Example:
        >>> mha = nn.MultiheadAttention(4, 1)
        >>> q, kv = torch.randn(3, 1, 4), torch.randn(5, 1, 4)
        >>> _call_inputs(mha, (), {'value': kv, 'key': kv, 'query': q})[:3] == (q, kv, kv)
        True
    """
    if not kwargs:
        return tuple(args)
    signature = inspect.signature(module.forward)
    unknown = []
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:  # the wrapper takes what the signature does not say
        known = {key: value for key, value in kwargs.items() if key in signature.parameters}
        unknown = [value for key, value in kwargs.items() if key not in known]
        try:
            bound = signature.bind_partial(*args, **known)
        except TypeError:
            return tuple(args) + tuple(kwargs.values())
    bound.apply_defaults()
    inputs: list = []
    for parameter, value in bound.arguments.items():
        kind = signature.parameters[parameter].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            inputs += value
        elif kind is inspect.Parameter.VAR_KEYWORD:
            inputs += value.values()
        else:
            inputs.append(value)
    return tuple(inputs) + tuple(unknown)


def _kind_output(name: str, module: nn.Module, output: Any) -> torch.Tensor:
    """The tensor a layer kind's op returned: ``output``, or the first tensor of a tuple
    that a subclass's forward returns beside it (PhiMoE's router, an ``nn.Linear`` whose
    forward returns its logits, then the routing it derives from them)."""
    if isinstance(output, torch.Tensor):
        return output
    first = next((t for t in output if isinstance(t, torch.Tensor)), None) \
        if isinstance(output, (tuple, list)) else None
    if first is None:
        raise TypeError(f'{name!r} ({type(module).__name__}): its forward returned '
                        f'{type(output).__name__}, not a tensor, so its FLOPs cannot be '
                        'counted')
    return first


def get_model_complexity(model: nn.Module, example_inputs: Any = None,
                         per_module: Optional[Dict[str, int]] = None,
                         layer_kinds: LayerKindsArg = None,
                         attention: bool = False) -> Complexity:
    """Count FLOPs with one forward (eval mode, no grad) and parameters.

    Args:
        model: a dense, masked or slimmed model.
        example_inputs: tensor, tuple or dict for the forward; default 1x3x224x224.
        per_module: if given, filled with the FLOPs of each counted module (and
            ``'<attention>'`` for attention products).
        layer_kinds: layer kinds for this count, over the registered ones.
        attention: also count products of two activations (attention's ``QK^T`` and
            ``AV``, ``scaled_dot_product_attention``); OpenMMLab's counters do not.

    Example:
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Flatten(), nn.Linear(8 * 16, 2))
        >>> c = get_model_complexity(net, torch.randn(1, 3, 4, 4))
        >>> c.flops == 16 * 8 * 3 * 9 + 128 * 2
        True
    """
    if example_inputs is None:
        example_inputs = default_example_inputs(model)
    kinds: KindTable = as_table(layer_kinds)
    flops: Dict[str, int] = {}
    counter = _FunctionCounter(model, kinds, attention)
    handles = []

    def enter(mod, args):
        counter.depth += 1

    for name, module in model.named_modules():
        kind = kinds.kind_of(module)
        if kind is not None:
            def hook(mod, args, kwargs, output, name=name, kind=kind):
                counter.depth -= 1
                inputs = _call_inputs(mod, args, kwargs)
                kept = kept_widths(mod, kind.widths(mod))
                output = _kind_output(name, mod, output)
                x = inputs[0] if inputs else None
                rows, all_rows = counter.kept_share(mod, x, output)
                flops[name] = flops.get(name, 0) + \
                    kind.flops(mod, inputs, output, kept) * rows // all_rows
                counter.note_output(mod, x, output)
            handles.append(module.register_forward_pre_hook(enter))
            handles.append(module.register_forward_hook(hook, with_kwargs=True))
        elif isinstance(module, _RECURRENT):
            def recurrent(mod, args, kwargs, output, name=name):
                sequence = _call_inputs(mod, args, kwargs)[0]
                flops[name] = flops.get(name, 0) + recurrent_macs(mod, sequence)
            handles.append(module.register_forward_hook(recurrent, with_kwargs=True))
    try:
        with evaluating(model), torch.no_grad(), counter:
            call_model(model, example_inputs)
    finally:
        for handle in handles:
            handle.remove()
    for key, value in counter.flops.items():
        flops[key] = flops.get(key, 0) + value
    if attention:
        flops.setdefault('<attention>', 0)
    if per_module is not None:
        per_module.update(flops)
    return Complexity(sum(flops.values()), count_params(model, kinds))
