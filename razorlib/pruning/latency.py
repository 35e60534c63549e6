"""Latency budgets: per-layer latency tables over kept widths, cached on disk, and the
search that meets a fraction of the dense model's measured latency.

The table (:class:`LatencyTable`) holds, for every masked layer of a prepared pruner
(the layers whose channels some prunable group changes), its latency on the target
runtime over a grid of kept widths: the layer alone, sliced to the kept input and output
channels of the groups it reads and writes at each of ``points`` uniform ratios (a
depthwise conv, whose input and output are one group, along the diagonal only).  The
indices come from the pruner's own masks, so group convs and bound channels are sliced
as the real subnets are.  A subnet's latency is predicted from it by interpolating each
layer's grid at the layer's kept widths and summing over the layers.

:class:`SubnetLatency` measures subnets (sliced copies, timed beside the dense model)
and predicts them from the table; :func:`~razorlib.pruning.latency_search.search_latency`
uses both to find the largest candidate of an allocation that meets ``latency=`` (a
fraction of the dense model's latency) with few whole-model measurements.  Tables are
cached as JSON, keyed by the model's structure and masked layers, the input shapes, the
runtime (name, device, threads, quantile, software versions) and the grid.
"""
import copy
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn

from ..layers import IN_MASK, OUT_MASK, kept_widths
from ..utils.files import atomic_write_text
from .latency_search import LatencyChoice, search_latency
from .masks import remove_masks
from .runtimes import Runtime, RuntimeArg, build_runtime
from .slicing import slim_model

__all__ = ['LayerLatency', 'LatencyTable', 'SubnetLatency', 'LatencyChoice', 'GRID_RATIOS']

Keep = Dict[str, np.ndarray]

#: The uniform ratios whose kept widths each layer is timed at (``points=5``).
GRID_RATIOS = (0.125, 0.25, 0.5, 0.75, 1.0)
TABLE_VERSION = 1


@dataclass
class LayerLatency:
    """One layer's latency over its kept widths.

    Args:
        calls: times the layer runs in one forward.
        ins, outs: kept input / output widths of the grid, ascending.
        ms: ``ms[i][j]``: milliseconds at ``ins[i]`` inputs and ``outs[j]`` outputs; for
            a ``bound`` layer one row, ``ms[0][j]`` at ``ins[j]`` and ``outs[j]``.
        bound: input and output widths change together (a depthwise conv).

    Example:
        >>> LayerLatency(1, [2, 4], [4, 8], [[1., 2.], [2., 4.]]).at(3, 8)
        3.0
    """
    calls: int
    ins: List[int]
    outs: List[int]
    ms: List[List[float]]
    bound: bool = False

    def at(self, kept_in: int, kept_out: int) -> float:
        """Milliseconds at kept widths, interpolated linearly (clamped at the grid's
        ends); times :attr:`calls` is the layer's share of one forward."""
        if self.bound:
            return float(np.interp(kept_out, self.outs, self.ms[0]))
        rows = [np.interp(kept_out, self.outs, row) for row in self.ms]
        return float(np.interp(kept_in, self.ins, rows))


@dataclass
class LatencyTable:
    """Per-layer latency over kept widths on one runtime, for one model and input.

    Args:
        key: the cache key (:meth:`SubnetLatency.table_key`).
        meta: what the key was made of, readable.
        layers: layer name -> :class:`LayerLatency`.
    """
    key: str
    meta: Dict[str, Any]
    layers: Dict[str, LayerLatency] = field(default_factory=dict)

    def predict(self, widths: Dict[str, Tuple[int, int]]) -> float:
        """The summed milliseconds of the layers at kept ``(in, out)`` widths."""
        return sum(layer.calls * layer.at(*widths[name]) for name, layer in self.layers.items())

    def to_json(self) -> str:
        return json.dumps(dict(version=TABLE_VERSION, key=self.key, meta=self.meta,
                               layers={n: asdict(lat) for n, lat in self.layers.items()}),
                          indent=1)

    @classmethod
    def from_json(cls, text: str, source: str = '<string>') -> 'LatencyTable':
        """Read a table written by :meth:`to_json`; ``source`` names it in errors."""
        data = json.loads(text)
        if data.get('version') != TABLE_VERSION:
            raise ValueError(f'{source}: latency table version {data.get("version")!r}, '
                             f'expected {TABLE_VERSION}; delete the file to re-measure')
        return cls(data['key'], data['meta'],
                   {n: LayerLatency(**lat) for n, lat in data['layers'].items()})

    def save(self, path: Union[str, Path]) -> None:
        atomic_write_text(path, self.to_json())

    @classmethod
    def load(cls, path: Union[str, Path]) -> 'LatencyTable':
        return cls.from_json(Path(path).read_text(), str(path))


def _inputs_tuple(example_inputs: Any) -> Tuple[torch.Tensor, ...]:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs, )
    if isinstance(example_inputs, (tuple, list)) and all(
            isinstance(x, torch.Tensor) for x in example_inputs):
        return tuple(example_inputs)
    raise TypeError('a latency budget needs example inputs that are a tensor or a tuple of '
                    f'positional tensors, got {type(example_inputs).__name__}')


class SubnetLatency:
    """Measured and predicted latency of a prepared pruner's subnets on one runtime.

    Args:
        pruner: a prepared :class:`~razorlib.pruning.StructurePruner`.
        example_inputs: the forward's inputs (a tensor or a tuple of tensors).
        runtime: ``'torch'``, ``'onnxruntime'``, ``'cuda'``, a config dict or a
            :class:`~razorlib.pruning.runtimes.Runtime`.
        points: how many of :data:`GRID_RATIOS` (its last ones, 1.0 always) the table
            times each layer at; or a sequence of ratios.
        tolerance: a measured candidate this close to the budget (relative) ends the
            search; the chosen subnet is at most this much above it.
        max_measurements: whole-model measurements the search may make after the dense
            and the smallest subnets.
    """

    def __init__(self, pruner: Any, example_inputs: Any, runtime: RuntimeArg = 'torch',
                 points: Union[int, Tuple[float, ...]] = 5, tolerance: float = 0.02,
                 max_measurements: int = 10):
        self.pruner, self.inputs = pruner, _inputs_tuple(example_inputs)
        self.runtime: Runtime = build_runtime(runtime)
        ratios = GRID_RATIOS[-points:] if isinstance(points, int) else tuple(points)
        self.ratios = tuple(sorted(set(ratios) | {1.0}))
        self.tolerance, self.max_measurements = tolerance, max_measurements
        self._table: Optional[LatencyTable] = None
        self._sums: Dict[tuple, float] = {}

    # ------------------------------------------------------------------ the table
    def table_key(self) -> Tuple[str, Dict[str, Any]]:
        """The cache key: a hash of the model's structure, the masked layers, the input
        shapes, the runtime's fields (:meth:`Runtime.key_fields`) and the grid."""
        meta = dict(model=type(self.pruner.model).__name__,
                    structure=hashlib.sha256(str(self.pruner.model).encode()).hexdigest(),
                    layers=hashlib.sha256(' '.join(sorted(self.pruner._masked)).encode())
                    .hexdigest(),
                    inputs=[list(x.shape) for x in self.inputs],
                    ratios=list(self.ratios), **self.runtime.key_fields())
        key = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:24]
        return key, meta

    @property
    def table(self) -> LatencyTable:
        """The layers' table: read from the runtime's cache dir, or measured (and cached)."""
        if self._table is None:
            key, meta = self.table_key()
            path = (self.runtime.cache_dir / f'{meta["model"]}-{key}.json'
                    if self.runtime.cache_dir is not None else None)
            if path is not None and path.is_file():
                self._table = LatencyTable.load(path)
            else:
                self._table = LatencyTable(key, meta, self._measure_layers())
                if path is not None:
                    self._table.save(path)
        return self._table

    def _measure_layers(self) -> Dict[str, LayerLatency]:
        pruner = self.pruner
        calls, inputs = self._record_inputs()
        previous = pruner.current_subnet
        kept: Dict[str, List[Tuple[List[int], List[int]]]] = {n: [] for n in calls}
        try:
            for ratio in self.ratios:  # the masks' kept indices at each uniform ratio
                pruner.set_subnet({gid: g.keep_best(np.arange(g.num_channels),
                                                    max(1, round(ratio * g.num_channels)))
                                   for gid, g in pruner._require_prepared().prunable.items()})
                for name in calls:
                    kept[name].append(_kept_indices(pruner._masked[name]))
        finally:
            pruner.set_subnet(previous)
        return {name: self._measure_layer(name, calls[name], inputs[name], kept[name])
                for name in calls}

    def _record_inputs(self) -> Tuple[Dict[str, int], Dict[str, Tuple[torch.Tensor, ...]]]:
        """Calls and first inputs of every masked layer in one full-width forward."""
        pruner, calls, inputs = self.pruner, {}, {}
        previous = pruner.current_subnet
        pruner.set_max_channel()

        def hook(name: str) -> Callable:
            def record(module: nn.Module, args: Tuple) -> None:
                calls[name] = calls.get(name, 0) + 1
                inputs.setdefault(name, tuple(a.detach() for a in args))
            return record
        handles = [m.register_forward_pre_hook(hook(n)) for n, m in pruner._masked.items()]
        training = pruner.model.training
        try:
            with torch.no_grad():
                pruner.model.eval()(*self.inputs)
        finally:
            for handle in handles:
                handle.remove()
            pruner.model.train(training)
            pruner.set_subnet(previous)
        return calls, inputs

    def _measure_layer(self, name: str, calls: int, args: Tuple[torch.Tensor, ...],
                       kept: List[Tuple[List[int], List[int]]]) -> LayerLatency:
        module = self.pruner._masked[name]
        kind = self.pruner.kinds.kind_of(module)
        in_dim = -module._buffers[IN_MASK if IN_MASK in module._buffers else OUT_MASK].dim()
        ins = _unique_by_length([k[0] for k in kept])
        outs = _unique_by_length([k[1] for k in kept])

        def time_at(in_idx: Optional[List[int]], out_idx: Optional[List[int]]) -> float:
            layer = copy.deepcopy(module)
            remove_masks(layer)
            axes = {a: i for a, i in (('in', in_idx), ('out', out_idx))
                    if a in kind.axes and i is not None}
            kind.plan_slice(name, layer, axes).apply(layer)
            channels = in_idx if 'in' in kind.axes else out_idx
            x = args[0].index_select(in_dim, torch.as_tensor(channels))
            return self.runtime.latency([layer], (x, ) + args[1:])[0]

        bound = False
        try:
            grid = [[time_at(i, o) for o in outs] for i in ins]
        except ValueError:  # the layer cannot take these widths apart: time it on the diagonal
            bound, pairs = True, _unique_pairs(kept)
            ins, outs = [_width(i) for i, _ in pairs], [_width(o) for _, o in pairs]
            return LayerLatency(calls, ins, outs, [[time_at(i, o) for i, o in pairs]], bound)
        return LayerLatency(calls, [_width(i) for i in ins], [_width(o) for o in outs], grid,
                            bound)

    # ------------------------------------------------------------------ subnets
    def predicted_sum(self, keep: Keep) -> float:
        """The table's summed layer latency of a subnet (masks put back afterwards)."""
        key = tuple(np.packbits(k).tobytes() for k in keep.values())
        if key not in self._sums:
            pruner = self.pruner
            previous = pruner.current_subnet
            pruner.set_subnet(keep)
            try:
                widths = {}
                for name, module in pruner._masked.items():
                    kept = kept_widths(module, pruner.kinds.kind_of(module).widths(module))
                    widths[name] = (kept.get('in', kept.get('out')), kept.get('out', 0))
            finally:
                pruner.set_subnet(previous)
            self._sums[key] = self.table.predict(widths)
        return self._sums[key]

    def slim(self, keep: Keep) -> nn.Module:
        """A sliced copy of the pruner's model at ``keep`` (the pruner is left as it was)."""
        pruner = self.pruner
        previous = pruner.current_subnet
        pruner.set_subnet(keep)
        try:
            cfg = pruner.export_subnet()
        finally:
            pruner.set_subnet(previous)
        return slim_model(copy.deepcopy(pruner.model), cfg, pruner.kinds)

    def measure(self, keeps: List[Keep]) -> List[float]:
        """Measured milliseconds of the sliced subnets, their runs interleaved."""
        return self.runtime.latency([self.slim(keep) for keep in keeps], self.inputs)

    def search(self, subnet: Callable[[int], Keep], size: int, target: float) -> LatencyChoice:
        """The largest candidate ``0..size`` (``subnet(i)``, keeping more as ``i`` grows,
        ``size`` the dense model) whose measured latency is at most ``target`` of the
        dense model's (within :attr:`tolerance`): :func:`~razorlib.pruning.latency_search.
        search_latency`.

        Raises:
            ValueError: even the smallest candidate is slower than the budget; the
                message names its measured fraction.
        """
        return search_latency(self, subnet, size, target)


def _kept_indices(module: nn.Module) -> Tuple[List[int], List[int]]:
    def nonzero(buffer: str) -> Optional[List[int]]:
        mask = module._buffers.get(buffer)
        return None if mask is None else mask.flatten().nonzero().flatten().tolist()
    return nonzero(IN_MASK), nonzero(OUT_MASK)


def _width(selection: Optional[List[int]]) -> int:
    """A selection's kept width; 0 for an axis the layer has no mask on."""
    return 0 if selection is None else len(selection)


def _unique_by_length(selections: List[Optional[List[int]]]) -> List[Optional[List[int]]]:
    """One selection per kept width, ascending."""
    by_length = {_width(s): s for s in selections}
    return [by_length[n] for n in sorted(by_length)]


def _unique_pairs(kept: List[Tuple[Optional[List[int]], Optional[List[int]]]]
                  ) -> List[Tuple[Optional[List[int]], Optional[List[int]]]]:
    """One ``(in, out)`` selection per kept output width, ascending."""
    by_width = {_width(o) or _width(i): (i, o) for i, o in kept}
    return [by_width[n] for n in sorted(by_width)]
