"""Channel slots: ids for every traced channel, bound together and frozen with reasons.

Each layer output channel (and each channel of a parameter or an untracked tensor) gets an
integer *slot*.  Rules bind slots that must be kept or pruned together (``a + b`` binds
``a``'s channel i to ``b``'s channel i) and freeze slots that must never be pruned.
Binding is recorded as edges and resolved once, vectorised, by :meth:`SlotTable.classes`:
tracing stays linear in the size of the graph.
"""
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

#: Kinds of freeze reason that are errors under ``strict=True`` (and that ``razorlib.prune``
#: warns about): the op, shape or code at fault may be fixable, where the other kinds are
#: plain limits of the model.
STRICT_KINDS = ('unknown-op', 'shape', 'runtime', 'untracked')

#: Kind of freeze reason that keeps some channels of a group whole without freezing the
#: rest (``gqa='query'``'s key/value heads, the channels a roll wraps around): a fused
#: projection of queries, keys and values (GPTBigCode's multi-query ``c_attn``, Phi-3's
#: ``qkv_proj``) still prunes its query heads, and a rolled conv output its other
#: channels, where no other reason freezes its group (``groups.build_groups``).
KEPT = 'kept'


@dataclass
class FrozenReason:
    """Why some channels can never be pruned.

    Args:
        kind: one of ``unknown-op`` (a grad_fn missing from the rule table), ``shape`` (a
            rule met a shape it cannot explain), ``mixing`` (an op known to mix channels),
            ``output`` (the channels reach a model output), ``dead-end`` (a module output
            nothing uses), ``except-key`` (excluded by the user), ``external`` (channels of a
            model input or constant), ``runtime`` (the model's code fails when they are
            pruned, see ``pruning/verify.py``), ``untracked`` (the model's code reads a
            parameter outside autograd, see ``literal_sizes.py``), ``fixed`` (an op
            takes the channels at positions of its own), :data:`KEPT` (an option keeps
            them whole; the rest of their group may prune).
        op: the grad_fn name (or module or parameter name) at fault.
        message: what happened, in words.
        upstream: names of the nearest modules feeding the op.
        downstream: names of the nearest modules the op feeds.
    """
    kind: str
    op: str
    message: str
    upstream: Tuple[str, ...] = ()
    downstream: Tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f'[{self.kind}] {self.op}: {self.message}'
        if self.upstream:
            text += f"; after {', '.join(self.upstream)}"
        if self.downstream:
            text += f"; before {', '.join(self.downstream)}"
        return text


@dataclass
class SlotSource:
    """A block of consecutive slots allocated for one producer."""
    kind: str  # 'layer', 'param' or 'external'
    name: str
    start: int
    size: int


@dataclass
class _Binding:
    reason: str
    a: np.ndarray
    b: np.ndarray


@dataclass
class SlotTable:
    """Allocates slots, records bindings and freezes, and resolves them into classes."""
    sources: List[SlotSource] = field(default_factory=list)
    bindings: List[_Binding] = field(default_factory=list)
    freezes: List[Tuple[np.ndarray, FrozenReason]] = field(default_factory=list)
    required: List[Tuple[np.ndarray, str]] = field(default_factory=list)
    size: int = 0

    def allocate(self, size: int, kind: str, name: str) -> np.ndarray:
        """Return ``size`` fresh slot ids owned by ``name``."""
        start = self.size
        self.size += size
        self.sources.append(SlotSource(kind, name, start, size))
        return np.arange(start, start + size, dtype=np.int64)

    def bind(self, a: np.ndarray, b: np.ndarray, reason: str) -> None:
        """Bind ``a[i]`` to ``b[i]`` for every i: they are kept or pruned together."""
        if a.shape != b.shape:
            raise ValueError(f'cannot bind {a.shape} slots to {b.shape} slots ({reason})')
        if a.size and not np.array_equal(a, b):
            self.bindings.append(_Binding(reason, a, b))

    def freeze(self, slots: np.ndarray, reason: FrozenReason) -> None:
        """Mark ``slots`` (and everything bound to them) as never prunable."""
        if slots.size:
            self.freezes.append((slots, reason))

    def require(self, slots: np.ndarray, what: str) -> None:
        """Record that a subnet must keep at least one of ``slots``.

        A layer's channel axis needs one channel, which the groups know from the layers'
        uses; a rule records here what else would break with none (the input of a
        ``chunk``, whose pieces would vanish).  ``what`` names it in error messages.
        """
        if slots.size:
            self.required.append((slots, what))

    def classes(self) -> np.ndarray:
        """Label every slot with the smallest slot id it is (transitively) bound to."""
        if not self.bindings:
            return np.arange(self.size, dtype=np.int64)
        return connected_labels(self.size, np.concatenate([b.a for b in self.bindings]),
                                np.concatenate([b.b for b in self.bindings]))

    def binding_reasons(self, slots: np.ndarray) -> List[str]:
        """Reasons of the bindings that involve any of ``slots`` (for error messages)."""
        out: List[str] = []
        for binding in self.bindings:
            if (np.isin(binding.a, slots).any() or np.isin(binding.b, slots).any()) \
                    and binding.reason not in out:
                out.append(binding.reason)
        return out

    def source_of(self, slot: int) -> Optional[SlotSource]:
        """The source that allocated ``slot``."""
        starts = [s.start for s in self.sources]
        idx = int(np.searchsorted(starts, slot, side='right')) - 1
        return self.sources[idx] if idx >= 0 else None


def connected_labels(size: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components of ``size`` nodes joined by edges ``a[i] - b[i]``.

    Each node is labelled with the smallest node of its component.  Hook-and-jump: every
    round points the larger of two joined labels at the smaller and compresses paths, all
    vectorised; a handful of rounds suffice.

    Example:
        >>> connected_labels(5, np.array([0, 3]), np.array([2, 4])).tolist()
        [0, 1, 0, 3, 3]
    """
    labels = np.arange(size, dtype=np.int64)
    while True:
        la, lb = labels[a], labels[b]
        if np.array_equal(la, lb):
            return labels
        low = np.minimum(la, lb)
        np.minimum.at(labels, la, low)
        np.minimum.at(labels, lb, low)
        while True:
            jumped = labels[labels]
            if np.array_equal(jumped, labels):
                break
            labels = jumped
