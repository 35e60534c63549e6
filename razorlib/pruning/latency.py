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
cached as JSON, keyed by the model's structure, the input shapes, every masked layer's
inputs (the shape, dtype and memory format of each call's) and its parameters' dtypes and
memory formats, the runtime (class, name, options, device, threads, quantile, software
versions) and the grid.  A layer called on inputs of several shapes (a conv shared by two
branches) is timed on each of them.

The cache is only a cache: a file that cannot be read or does not describe the table
asked for (invalid JSON, another format version, fields missing or malformed, other
layers or grid widths than the model's, another key inside) is warned about
(:class:`LatencyCacheWarning`, naming the file and what is wrong), re-measured and
overwritten; a cache directory that cannot be written is warned about and the table kept
in memory for the run.
"""
import contextlib
import copy
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn

from ..layers import IN_MASK, OUT_MASK, kept_widths
from ..tracing.forward import call_model, without_kv_cache
from ..utils.caller import warn_at_caller
from ..utils.files import atomic_write_text
from ..utils.modes import evaluating
from .latency_search import LatencyChoice, search_latency
from .masks import layer_input, remove_masks
from .runtimes import Inputs, Runtime, RuntimeArg, build_runtime
from .slicing import slim_model

__all__ = ['LayerLatency', 'LatencyTable', 'SubnetLatency', 'LatencyChoice', 'GRID_RATIOS',
           'LatencyTableError', 'LatencyCacheWarning']

Keep = Dict[str, np.ndarray]
#: Per masked layer, the kept ``(in, out)`` channel indices at each grid ratio.
Kept = Dict[str, List[Tuple[Optional[List[int]], Optional[List[int]]]]]

#: The uniform ratios whose kept widths each layer is timed at (``points=5``).
GRID_RATIOS = (0.125, 0.25, 0.5, 0.75, 1.0)
#: 2: the key describes every masked layer's inputs and the runtime's class, and a layer's
#: ``ms`` is the mean of its calls on all its input shapes (1: its first call's).
TABLE_VERSION = 2


@dataclass
class _LayerInput:
    """One of the distinct inputs a masked layer is called on in a forward.

    Args:
        args: the positional arguments of the first call on it.
        signature: their shapes, dtypes and memory formats (:func:`_signature`).
        calls: how many calls of the forward take an input of this signature.
    """
    args: Tuple[Any, ...]
    signature: List[Any]
    calls: int = 1


#: Per masked layer run by the forward, its distinct inputs in the order first seen.
Recorded = Dict[str, List[_LayerInput]]
#: What the table is measured from: the layers' recorded inputs and their kept indices.
Plan = Tuple[Recorded, Kept]


@dataclass
class LayerLatency:
    """One layer's latency over its kept widths.

    Args:
        calls: times the layer runs in one forward.
        ins, outs: kept input / output widths of the grid, ascending.
        ms: ``ms[i][j]``: milliseconds of one call at ``ins[i]`` inputs and ``outs[j]``
            outputs, the mean over the forward's calls (each input shape timed once and
            weighted by its calls); for a ``bound`` layer one row, ``ms[0][j]`` at
            ``ins[j]`` and ``outs[j]``.
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
        """Read a table written by :meth:`to_json`; ``source`` names it in errors.

        Raises:
            LatencyTableError: the text is not such a table (invalid JSON, another
                :data:`TABLE_VERSION`, a field missing or malformed); the message says what.

        Example:
            >>> LatencyTable.from_json('{"version": 2, "key": "k", "meta": {}}', 't.json')
            Traceback (most recent call last):
            ...
            razorlib.pruning.latency.LatencyTableError: t.json: no 'layers' field
        """
        try:
            data = json.loads(text)
        except ValueError as err:  # JSONDecodeError, or a number out of range
            raise LatencyTableError(source, f'invalid JSON ({err})') from None
        if not isinstance(data, dict):
            raise LatencyTableError(source, f'a JSON {type(data).__name__}, not an object')
        if data.get('version') != TABLE_VERSION:
            raise LatencyTableError(source, f'latency table version {data.get("version")!r}, '
                                            f'expected {TABLE_VERSION}')
        for name, kind in (('key', str), ('meta', dict), ('layers', dict)):
            if name not in data:
                raise LatencyTableError(source, f'no {name!r} field')
            if not isinstance(data[name], kind):
                raise LatencyTableError(source, f'{name!r} is a {type(data[name]).__name__}, '
                                                f'not a {kind.__name__}')
        layers = {}
        for name, fields in data['layers'].items():
            problem = _layer_problem(fields)
            if problem:
                raise LatencyTableError(source, f'layer {name!r}: {problem}')
            layers[name] = LayerLatency(**fields)
        return cls(data['key'], data['meta'], layers)

    def save(self, path: Union[str, Path]) -> None:
        atomic_write_text(path, self.to_json())

    @classmethod
    def load(cls, path: Union[str, Path]) -> 'LatencyTable':
        """Read a table file (:meth:`from_json`; ``OSError`` if it cannot be read)."""
        try:
            text = Path(path).read_text()
        except UnicodeDecodeError as err:
            raise LatencyTableError(str(path), f'not text ({err})') from None
        return cls.from_json(text, str(path))


class LatencyTableError(ValueError):
    """A latency table that cannot be read: ``source`` names it, ``reason`` says why."""

    def __init__(self, source: str, reason: str):
        super().__init__(f'{source}: {reason}')
        self.source, self.reason = source, reason


class LatencyCacheWarning(UserWarning):
    """A cached latency table was unusable (re-measured), or could not be written."""


def _layer_problem(fields: Any) -> Optional[str]:
    """What is wrong with a layer's JSON fields (None if nothing): names, types, ascending
    widths, finite non-negative milliseconds, the grid's shape.

    Example:
        >>> _layer_problem(dict(calls=1, ins=[2, 4], outs=[4], ms=[[1.0]]))
        'ms is a 1x1 grid, expected 2x1 (ins x outs)'
    """
    if not isinstance(fields, dict):
        return f'a {type(fields).__name__}, not an object'
    names = {'calls', 'ins', 'outs', 'ms', 'bound'}
    missing = sorted(names - {'bound'} - set(fields))
    extra = sorted(set(fields) - names)
    if missing or extra:
        return ', '.join(([f'no {", ".join(missing)}'] if missing else []) +
                         ([f'unknown {", ".join(extra)}'] if extra else []))

    def ints(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    def number(value: Any) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value) and value >= 0)

    calls, ins, outs, ms = (fields[k] for k in ('calls', 'ins', 'outs', 'ms'))
    bound = fields.get('bound', False)
    if not ints(calls) or calls < 1:
        return f'calls is {calls!r}, not a positive integer'
    if not isinstance(bound, bool):
        return f'bound is {bound!r}, not true or false'
    for axis, widths in (('ins', ins), ('outs', outs)):
        if (not isinstance(widths, list) or not widths or not all(map(ints, widths))
                or any(a >= b for a, b in zip(widths, widths[1:]))):
            return f'{axis} is {widths!r}, not ascending channel counts'
    if not isinstance(ms, list) or not all(isinstance(row, list) for row in ms):
        return 'ms is not a list of rows'
    if not all(number(v) for row in ms for v in row):
        return 'ms holds a value that is not a finite non-negative number'
    rows, cols = (1, len(outs)) if bound else (len(ins), len(outs))
    shape = f'{len(ms)}x{len(ms[0]) if ms else 0}'
    if len(ms) != rows or any(len(row) != cols for row in ms):
        return f'ms is a {shape} grid, expected {rows}x{cols} (ins x outs)'
    if bound and len(ins) != len(outs):
        return f'a bound layer with {len(ins)} ins and {len(outs)} outs'
    return None


def _example_inputs(example_inputs: Any) -> Inputs:
    """A tensor or a sequence of tensors as a tuple; a mapping (keyword arguments, a
    tokenizer's ``BatchEncoding``) as a dict."""
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs, )
    if isinstance(example_inputs, (tuple, list)) and all(
            isinstance(x, torch.Tensor) for x in example_inputs):
        return tuple(example_inputs)
    if isinstance(example_inputs, Mapping) and all(isinstance(k, str) for k in example_inputs):
        return dict(example_inputs)
    raise TypeError('a latency budget needs example inputs that are a tensor, a tuple of '
                    'positional tensors or a mapping of keyword arguments (a Hugging Face '
                    f"model's {{'input_ids': ...}}), got {type(example_inputs).__name__}")


def _memory_format(tensor: torch.Tensor) -> str:
    """``'contiguous'``, ``'channels_last'`` (4-d), ``'channels_last_3d'`` (5-d) or
    ``'strided'`` (any other layout)."""
    if tensor.is_contiguous():
        return 'contiguous'
    if tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last):
        return 'channels_last'
    if tensor.dim() == 5 and tensor.is_contiguous(memory_format=torch.channels_last_3d):
        return 'channels_last_3d'
    return 'strided'


def _layout(model: nn.Module, inputs: Inputs) -> Dict[str, Any]:
    """The dtypes and memory formats of the input tensors and the set of the parameters',
    a readable summary in the key's meta (which layer has which is in the layers' hash,
    :func:`_layer_signatures`); empty when every one is float32 and contiguous, the
    common case."""
    values = inputs.values() if isinstance(inputs, Mapping) else inputs
    tensors = [x for x in values if isinstance(x, torch.Tensor)]
    params = list(model.parameters())
    layout = dict(input_dtypes=[str(x.dtype) for x in tensors],
                  input_formats=[_memory_format(x) for x in tensors],
                  param_dtypes=sorted({str(p.dtype) for p in params}),
                  param_formats=sorted({_memory_format(p) for p in params}))
    plain = dict(input_dtypes=['torch.float32'] * len(tensors),
                 input_formats=['contiguous'] * len(tensors),
                 param_dtypes=['torch.float32'] if params else [],
                 param_formats=['contiguous'] if params else [])
    return {} if layout == plain else layout


def _signature(value: Any) -> Any:
    """What of a layer's argument its latency depends on, JSON-able: a tensor's shape, dtype
    and memory format; another value's ``repr``.

    Example:
        >>> _signature(torch.zeros(2, 3, dtype=torch.float16)), _signature(2.0)
        ([[2, 3], 'torch.float16', 'contiguous'], '2.0')
    """
    if isinstance(value, torch.Tensor):
        return [list(value.shape), str(value.dtype), _memory_format(value)]
    return repr(value)


def _inputs_signature(inputs: Inputs) -> Any:
    """The signatures of the model's inputs, a mapping's by key: what a ready
    :class:`SubnetLatency` and the inputs of an allocation must agree on."""
    if isinstance(inputs, Mapping):
        return {k: _signature(v) for k, v in inputs.items()}
    return [_signature(x) for x in inputs]


def _layer_signatures(masked: Dict[str, nn.Module], recorded: Recorded) -> Dict[str, Any]:
    """Per masked layer, the signatures of its distinct inputs with their calls (none for
    a layer the forward does not run) and its parameters' (name, shape, dtype, memory
    format): two models of the same modules whose forwards feed them other shapes (another
    internal resolution), or whose layers differ in dtype or layout, get other keys."""
    return {name: dict(calls=[[x.signature, x.calls] for x in recorded.get(name, [])],
                       params=[[n, *_signature(p)] for n, p in module.named_parameters()])
            for name, module in masked.items()}


def _shapes(inputs: Inputs) -> Any:
    """The inputs' shapes for the key (a mapping's other values by ``repr``)."""
    if isinstance(inputs, Mapping):
        return {k: list(v.shape) if isinstance(v, torch.Tensor) else repr(v)
                for k, v in inputs.items()}
    return [list(x.shape) for x in inputs]


class SubnetLatency:
    """Measured and predicted latency of a prepared pruner's subnets on one runtime.

    Args:
        pruner: a prepared :class:`~razorlib.pruning.StructurePruner`.
        example_inputs: the forward's inputs: a tensor, a tuple of tensors or a mapping
            of keyword arguments (``model(**inputs)``: a Hugging Face model's
            ``{'input_ids': ...}``).
        runtime: ``'torch'``, ``'onnxruntime'``, ``'cuda'``, a config dict or a
            :class:`~razorlib.pruning.runtimes.Runtime`.
        points: how many of :data:`GRID_RATIOS` (its last ones, 1.0 always) the table
            times each layer at; or a sequence of ratios.
        tolerance: a measured candidate this close to the budget (relative) ends the
            search; the chosen subnet is at most this much above it.
        max_measurements: whole-model measurements the search may make after the dense
            and the smallest subnets.

    Raises:
        TypeError, ValueError: inputs of another kind, a runtime that is not one, one
            whose cache key fields are not JSON (:meth:`Runtime.key_fields`: a custom
            runtime's option that is a set, naming it), or one that cannot run this model
            (:meth:`Runtime.check`: onnxruntime and a float64 model), before anything is
            measured.
    """

    def __init__(self, pruner: Any, example_inputs: Any, runtime: RuntimeArg = 'torch',
                 points: Union[int, Tuple[float, ...]] = 5, tolerance: float = 0.02,
                 max_measurements: int = 10):
        self.pruner, self.inputs = pruner, _example_inputs(example_inputs)
        self.runtime: Runtime = build_runtime(runtime)
        self.runtime.key_fields()  # raises now, not after a search's first forwards
        self.runtime.check(pruner.model, self.inputs)
        ratios = GRID_RATIOS[-points:] if isinstance(points, int) else tuple(points)
        self.ratios = tuple(sorted(set(ratios) | {1.0}))
        self.tolerance, self.max_measurements = tolerance, max_measurements
        self._table: Optional[LatencyTable] = None
        self._sums: Dict[tuple, float] = {}

    def check_matches(self, pruner: Any, example_inputs: Any) -> None:
        """Refuse to serve an allocation of another pruner, or on other inputs: the search
        slices and times this one's pruner on this one's inputs.

        Raises:
            ValueError: naming what differs (the pruner, the inputs' signatures).
        """
        problems = []
        if pruner is not self.pruner:
            problems.append(f'it slices the subnets of the pruner it was built with '
                            f'({type(self.pruner).__name__} of a '
                            f'{type(self.pruner.model).__name__}), not of the '
                            f'{type(pruner).__name__} being allocated')
        mine = _inputs_signature(self.inputs)
        theirs = (mine if example_inputs is None  # none given: the timer's own
                  else _inputs_signature(_example_inputs(example_inputs)))
        if mine != theirs:
            problems.append(f'it measures on inputs {mine}, not the example_inputs '
                            f'{theirs} of the allocation')
        if problems:
            raise ValueError('runtime=SubnetLatency: ' + '; '.join(problems) + '. Build it as '
                             'SubnetLatency(pruner, example_inputs, runtime) of the pruner '
                             'and inputs being allocated, or pass the Runtime itself')

    # ------------------------------------------------------------------ the table
    def table_key(self) -> Tuple[str, Dict[str, Any]]:
        """The cache key: a hash of the model's structure, the input shapes, the masked
        layers' inputs and parameters (:func:`_layer_signatures`: one full-width forward
        records them), the dtypes and memory formats of the inputs and parameters (left
        out when all are float32 and contiguous), the runtime's fields
        (:meth:`Runtime.key_fields`: its class among them) and the grid."""
        return self._key(self._record_inputs())

    def _key(self, recorded: Recorded) -> Tuple[str, Dict[str, Any]]:
        model = self.pruner.model
        layers = _layer_signatures(self.pruner._masked, recorded)
        meta = dict(model=type(model).__name__,
                    structure=hashlib.sha256(str(model).encode()).hexdigest(),
                    layers=hashlib.sha256(json.dumps(layers, sort_keys=True).encode())
                    .hexdigest(),
                    inputs=_shapes(self.inputs), **_layout(model, self.inputs),
                    ratios=list(self.ratios), **self.runtime.key_fields())
        key = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:24]
        return key, meta

    def cache_path(self) -> Optional[Path]:
        """The file the table is cached in (None: the runtime caches nothing)."""
        return self._path(*self.table_key())

    def _path(self, key: str, meta: Dict[str, Any]) -> Optional[Path]:
        if self.runtime.cache_dir is None:
            return None
        return self.runtime.cache_dir / f'{meta["model"]}-{key}.json'

    @property
    def table(self) -> LatencyTable:
        """The layers' table: read from the runtime's cache dir, or measured (and cached).

        A cached file that is unusable (not a table, or not this one: other layers, calls
        or grid widths, another key inside) is warned about (:class:`LatencyCacheWarning`,
        naming the file and what is wrong), re-measured and overwritten.  A table of another
        format version (:data:`TABLE_VERSION`) is treated the same: the file holds
        measurements this library can always make again, so refusing it would only make
        the user delete it by hand.  A cache that cannot be written is warned about and
        the table kept in memory."""
        if self._table is None:
            recorded = self._record_inputs()
            key, meta = self._key(recorded)
            path = self._path(key, meta)
            plan = self._grid_plan(recorded)
            if path is not None and _exists(path):
                cached, problem = self._read_cache(path, key, plan)
                if cached is not None:
                    self._table = cached
                    return cached
                warn_at_caller(f'latency table cache {path}: {problem}; re-measuring it and '
                               'overwriting the file', LatencyCacheWarning)
            self._table = LatencyTable(key, meta, self._measure_layers(plan))
            if path is not None:
                self._save(path)
        return self._table

    def _read_cache(self, path: Path, key: str, plan: Plan
                    ) -> Tuple[Optional[LatencyTable], str]:
        """The cached table, or None and what makes the file unusable for this one."""
        try:
            table = LatencyTable.load(path)
        except OSError as err:
            return None, f'cannot be read ({type(err).__name__}: {err.strerror or err})'
        except LatencyTableError as err:
            return None, err.reason
        problem = self._table_problem(table, key, plan)
        return (None, problem) if problem else (table, '')

    @staticmethod
    def _table_problem(table: LatencyTable, key: str, plan: Plan) -> Optional[str]:
        """How ``table`` differs from the one ``key`` and the grid ``plan`` describe."""
        if table.key != key:
            return f'its key is {table.key!r}, not {key!r} (the file name\'s)'
        recorded, kept = plan
        missing = sorted(set(recorded) - set(table.layers))
        extra = sorted(set(table.layers) - set(recorded))
        if missing or extra:
            return ', '.join(([f'no layer {", ".join(missing[:3])}'] if missing else []) +
                             ([f'unknown layer {", ".join(extra[:3])}'] if extra else []))
        for name, layer in table.layers.items():
            calls = sum(x.calls for x in recorded[name])
            if layer.calls != calls:
                return f'layer {name!r} runs {layer.calls} times, not {calls}'
            pairs = _unique_pairs(kept[name])
            widths = (([_width(i) for i, _ in pairs], [_width(o) for _, o in pairs])
                      if layer.bound else
                      ([_width(i) for i in _unique_by_length([k[0] for k in kept[name]])],
                       [_width(o) for o in _unique_by_length([k[1] for k in kept[name]])]))
            if (layer.ins, layer.outs) != widths:
                return (f'layer {name!r} is timed at widths {layer.ins} x {layer.outs}, '
                        f'not the grid\'s {widths[0]} x {widths[1]}')
        return None

    def _save(self, path: Path) -> None:
        try:
            self._table.save(path)  # type: ignore[union-attr]
        except OSError as err:
            warn_at_caller(
                f'latency table not cached: cannot write {path} ({type(err).__name__}: '
                f'{err.strerror or err}); it is kept in memory for this run. Point '
                '$RAZORLIB_CACHE_DIR or the runtime\'s cache_dir option (runtime=dict(type=..., '
                'cache_dir=...)) to a writable directory, or give cache_dir=False to cache '
                'nothing', LatencyCacheWarning)

    def _grid_plan(self, recorded: Recorded) -> Plan:
        """The recorded layers and their kept channel indices at each ratio of the grid."""
        pruner = self.pruner
        previous = pruner.current_subnet
        kept: Kept = {n: [] for n in recorded}
        try:
            for ratio in self.ratios:  # the masks' kept indices at each uniform ratio
                pruner.set_subnet({gid: g.keep_best(np.arange(g.num_channels),
                                                    max(1, round(ratio * g.num_channels)))
                                   for gid, g in pruner._require_prepared().prunable.items()})
                for name in recorded:
                    kept[name].append(_kept_indices(pruner._masked[name]))
        finally:
            pruner.set_subnet(previous)
        return recorded, kept

    def _measure_layers(self, plan: Plan) -> Dict[str, LayerLatency]:
        recorded, kept = plan
        return {name: self._measure_layer(name, recorded[name], kept[name])
                for name in recorded}

    def _record_inputs(self) -> Recorded:
        """The distinct inputs (:func:`_signature`) of every masked layer in one full-width
        forward, each with its calls and the first call's arguments."""
        pruner, recorded = self.pruner, {}
        previous = pruner.current_subnet
        pruner.set_max_channel()

        def hook(name: str) -> Callable:
            def record(module: nn.Module, args: Tuple, kwargs: Dict[str, Any]) -> None:
                # an input passed by keyword (self.fc(input=x)) is timed as the first
                _note_call(recorded.setdefault(name, []),
                           args or (layer_input(module, args, kwargs, name), ))
            return record
        handles = [m.register_forward_pre_hook(hook(n), with_kwargs=True)
                   for n, m in pruner._masked.items()]
        try:
            with evaluating(pruner.model), torch.no_grad():
                call_model(pruner.model, self.inputs)
        finally:
            for handle in handles:
                handle.remove()
            pruner.set_subnet(previous)
        return recorded

    def _measure_layer(self, name: str, inputs: List[_LayerInput],
                       kept: List[Tuple[Optional[List[int]], Optional[List[int]]]]
                       ) -> LayerLatency:
        module = self.pruner._masked[name]
        kind = self.pruner.kinds.kind_of(module)
        in_dim = -module._buffers[IN_MASK if IN_MASK in module._buffers else OUT_MASK].dim()
        ins = _unique_by_length([k[0] for k in kept])
        outs = _unique_by_length([k[1] for k in kept])
        calls = sum(x.calls for x in inputs)

        def time_at(in_idx: Optional[List[int]], out_idx: Optional[List[int]]) -> float:
            """One call's mean milliseconds at these kept channels: each distinct input
            timed once, weighted by its calls."""
            layer = copy.deepcopy(module)
            remove_masks(layer)
            axes = {a: i for a, i in (('in', in_idx), ('out', out_idx))
                    if a in kind.axes and i is not None}
            kind.plan_slice(name, layer, axes).apply(layer)
            channels = torch.as_tensor(in_idx if 'in' in kind.axes else out_idx)
            total = 0.0
            for x in inputs:
                sliced = (x.args[0].index_select(in_dim, channels), ) + x.args[1:]
                total += x.calls * self.runtime.latency([layer], sliced)[0]
            return total / calls

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
        """Measured milliseconds of the sliced subnets, their runs interleaved (their
        transformers key/value cache off, whatever :meth:`Runtime.latency` does)."""
        models = [self.slim(keep) for keep in keeps]
        with contextlib.ExitStack() as stack:
            for model in models:
                stack.enter_context(without_kv_cache(model))
            return self.runtime.latency(models, self.inputs)

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


def _note_call(seen: List[_LayerInput], args: Tuple[Any, ...]) -> None:
    """Count a layer's call on an input it was called on before (by :func:`_signature`), or
    keep its (detached) arguments as a new input."""
    signature = [_signature(a) for a in args]
    for known in seen:
        if known.signature == signature:
            known.calls += 1
            return
    seen.append(_LayerInput(tuple(a.detach() if isinstance(a, torch.Tensor) else a
                                  for a in args), signature))


def _exists(path: Path) -> bool:
    """Whether ``path`` is there to read (an error that hides it, such as a directory
    that may not be searched, is for reading it to report)."""
    try:
        return path.exists()
    except OSError:
        return True


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
