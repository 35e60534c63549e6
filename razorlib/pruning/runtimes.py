"""Runtimes a latency budget is measured on: PyTorch eager (CPU or CUDA) and onnxruntime.

A :class:`Runtime` turns a module and its inputs into a timed call and answers one
question, :meth:`Runtime.latency`: the median milliseconds of a few modules, each run
``repeat`` times after ``warmup`` runs, *interleaved* (a, b, a, b, ...) so that a load
that comes and goes on a busy machine slows them alike and their ratio holds.  On a
machine with more runnable threads than cores a short run either finishes within its
time slice or waits a whole slice for another process, and the median of such a
two-humped distribution jumps between the humps: there ``quantile=0.1`` (a low
quantile: what the run costs when it is not pre-empted) is steadier.  Override
:meth:`Runtime.latency` to plug in another runtime or a deterministic stand-in (tests).

==================  =========================================================
``RUNTIMES`` name   runs
==================  =========================================================
``'torch'``         ``module(*inputs)`` in eval mode under ``no_grad``, on CPU
``'cuda'``          the same on the current CUDA device, synchronised per run;
                    ``graph=True``: replayed from a CUDA graph (the GPU's work,
                    not Python's kernel launches), ``dtype='float16'`` and
                    ``channels_last=True``: the form a GPU deployment runs
``'onnxruntime'``   the module exported to ONNX (TorchScript exporter), on
                    onnxruntime's CPU provider with every graph optimisation
==================  =========================================================

Inputs are a tuple of positional tensors or a mapping of keyword arguments (a Hugging
Face model's ``{'input_ids': ..., 'attention_mask': ...}``: ``module(**inputs)``).  The
modules run with their transformers key/value cache off
(:func:`~razorlib.tracing.forward.without_kv_cache`): one forward never needs it, and
its ``DynamicCache`` output cannot be exported to ONNX.
"""
import contextlib
import copy
import ctypes
import difflib
import gc
import io
import logging
import numbers
import os
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import (Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple,
                    Type, Union)

import numpy as np
import torch
import torch.nn as nn

from ..tracing.forward import flatten_tensors, without_kv_cache
from ..utils.checks import keyword_parameters
from ..utils.errors import first_line

__all__ = ['RUNTIMES', 'Runtime', 'TorchRuntime', 'CudaRuntime', 'OnnxRuntime',
           'build_runtime', 'check_runtime', 'RuntimeArg', 'default_cache_dir',
           'floating_dtype', 'CudaGraphReplay', 'copy_to']

#: Positional tensors, or keyword arguments (``module(**inputs)``).
Inputs = Union[Tuple[torch.Tensor, ...], Mapping]


def call_module(module: nn.Module, inputs: Inputs) -> Any:
    """``module(**inputs)`` for a mapping, else ``module(*inputs)``."""
    return module(**inputs) if isinstance(inputs, Mapping) else module(*inputs)


def inputs_to(inputs: Inputs, device: Union[str, torch.device]) -> Inputs:
    """The inputs' tensors on ``device`` (a mapping's other values as they are)."""
    if isinstance(inputs, Mapping):
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    return tuple(x.to(device) for x in inputs)


def default_cache_dir() -> Path:
    """Where latency tables are cached: ``$RAZORLIB_CACHE_DIR/latency``, else
    ``~/.cache/razorlib/latency``."""
    root = os.environ.get('RAZORLIB_CACHE_DIR') or Path.home() / '.cache' / 'razorlib'
    return Path(root) / 'latency'


class Runtime:
    """Where and how latency is measured.

    Args:
        threads: intra-op threads while timing (1: steady figures on a shared machine).
        warmup: untimed runs of each module first.
        repeat: timed runs of each module; the median is reported.
        cache_dir: where latency tables measured on this runtime are cached
            (default :func:`default_cache_dir`); ``False``: never cached.
        quantile: which quantile of the timed runs is reported (0.5: the median).

    Example:
        >>> runtime = TorchRuntime(repeat=3, warmup=1)
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
        >>> dense, small = runtime.latency([net, net[:1]], (torch.randn(1, 3, 16, 16), ))
        >>> dense > 0 and small > 0
        True
    """
    name = 'custom'
    device = 'cpu'

    def __init__(self, threads: int = 1, warmup: int = 5, repeat: int = 20,
                 cache_dir: Union[str, Path, bool, None] = None, quantile: float = 0.5):
        _check_counts(type(self).__name__,
                      dict(threads=threads, warmup=warmup, repeat=repeat, quantile=quantile))
        self.threads, self.warmup, self.repeat = int(threads), int(warmup), int(repeat)
        self.quantile = float(quantile)
        self.cache_dir = (None if cache_dir is False else
                          Path(cache_dir) if cache_dir not in (None, True) else
                          default_cache_dir())

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(threads={self.threads}, warmup={self.warmup}, '
                f'repeat={self.repeat}, quantile={self.quantile:g})')

    def versions(self) -> Dict[str, str]:
        """The software whose speed the figures depend on (part of a table's cache key)."""
        return {'torch': torch.__version__}

    def options(self) -> Dict[str, Any]:
        """The options that change what is timed beyond :class:`Runtime`'s own (part of a
        table's cache key); none here."""
        return {}

    def key_fields(self) -> Dict[str, Any]:
        """What makes figures of two runtimes comparable: the class (module and qualified
        name: two subclasses, which may time differently under one :attr:`name`, never
        share a table), name, device, threads, the quantile reported, the software
        versions and the :meth:`options`.

        The cache key is a hash of these fields as JSON (:func:`_json_key_value`): a
        ``torch.dtype``, ``torch.device`` or ``torch.memory_format`` among the device,
        versions and options is keyed by its ``str``, which names it exactly and alike on
        every run.

        Raises:
            TypeError: a value of another type (a set, an object), or an option whose name
                is no string or is one of the fields above; the class and the key at
                fault are named.

        Example:
            >>> class Half(TorchRuntime):
            ...     def options(self):
            ...         return {'dtype': torch.float16, 'fuse': {'conv', 'bn'}}
            >>> Half().key_fields()
            Traceback (most recent call last):
            ...
            TypeError: Half.options()['fuse'] is a set ({...}), which the latency table's ...
        """
        cls = type(self)
        options = self.options()
        fields = dict(runtime=self.name, runtime_class=f'{cls.__module__}.{cls.__qualname__}',
                      device=_json_key_value(self.device, f'{cls.__name__}.device'),
                      threads=self.threads, quantile=self.quantile,
                      versions=_json_key_value(self.versions(), f'{cls.__name__}.versions()'))
        for key in options:
            if not isinstance(key, str) or key in fields:
                what = ('is no string' if not isinstance(key, str) else
                        'is a field Runtime.key_fields() sets itself')
                raise TypeError(f'{cls.__name__}.options(): the option name {key!r} {what}, '
                                "so it cannot key the latency table's cache; name it "
                                f'otherwise (the fields are {", ".join(fields)})')
        return {**fields, **{key: _json_key_value(value, f'{cls.__name__}.options()[{key!r}]')
                             for key, value in options.items()}}

    def check(self, model: nn.Module, inputs: Inputs) -> None:
        """Refuse, before anything is measured, a model or inputs this runtime cannot
        run (raise ``ValueError``); nothing by default."""

    def compile(self, module: nn.Module, inputs: Inputs) -> Callable[[], Any]:
        """A function of no arguments that runs ``module`` on ``inputs`` once."""
        raise NotImplementedError(f'{type(self).__name__} must override compile() or '
                                  'latency()')

    def latency(self, modules: Sequence[nn.Module], inputs: Inputs) -> List[float]:
        """Milliseconds (the :attr:`quantile` of ``repeat`` runs; the median by default)
        of one call of each module on ``inputs`` (a tuple, or a mapping of keyword
        arguments), the modules' runs interleaved, transformers models' key/value cache
        off while they are compiled and timed."""
        with contextlib.ExitStack() as stack:
            for module in modules:
                stack.enter_context(without_kv_cache(module))
            runs = [self.compile(module, inputs) for module in modules]
            return interleaved_times(runs, self.warmup, self.repeat, self.quantile)


#: Values a cache key holds by their ``str``: they name themselves exactly, alike on every run.
_NAMED_BY_STR = (torch.dtype, torch.device, torch.memory_format)


def _json_key_value(value: Any, where: str) -> Any:
    """``value`` as a latency table's cache key holds it: JSON's strings, numbers, booleans
    and None as they are, a tuple as a list, a ``torch.dtype``, ``torch.device`` or
    ``torch.memory_format`` by its ``str``, lists and str-keyed dicts of these alike.

    Anything else is refused rather than written as its ``str`` or ``repr``: that of an
    object may hold its address (a key that changes every run: the cache never hits) or
    leave out what it is made of (two runtimes sharing one table), and a set's order
    changes from run to run.

    Raises:
        TypeError: naming ``where`` (``MyRuntime.options()['fuse']``), the value and its
            type.

    Example:
        >>> _json_key_value({'dtype': torch.float16, 'shape': (1, 8)}, 'R.options()')
        {'dtype': 'torch.float16', 'shape': [1, 8]}
    """
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, _NAMED_BY_STR):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_json_key_value(item, f'{where}[{i}]') for i, item in enumerate(value)]
    if isinstance(value, Mapping) and all(isinstance(key, str) for key in value):
        return {key: _json_key_value(item, f'{where}[{key!r}]') for key, item in value.items()}
    raise TypeError(f'{where} is a {type(value).__name__} ({value!r:.60}), which the latency '
                    "table's cache key cannot hold: it is JSON, so a runtime's options are "
                    'strings, numbers, booleans, None, torch dtypes, devices or memory formats, '
                    'or lists and str-keyed dicts of them; convert it where it is made (a set '
                    'to a sorted list, an object to a string that names it alike on every run)')


#: The smallest value of each count option of :class:`Runtime`.
_LEAST_COUNTS = {'threads': 1, 'warmup': 0, 'repeat': 1}


def _check_counts(owner: str, options: Mapping) -> None:
    """Refuse a count option (``threads``, ``warmup``, ``repeat``) that is not a whole
    number at least its least, or a ``quantile`` outside [0, 1], among ``options`` (those
    given): ``int()`` would silently turn ``repeat=2.7`` into 2 and ``threads=True`` into
    1.  ``owner`` (the runtime class) starts the message."""
    for name, least in _LEAST_COUNTS.items():
        value = options.get(name, least)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
            raise ValueError(f'{owner}: {name}={value!r}: a whole number >= {least} (an int)')
    quantile = options.get('quantile', 0.5)
    if isinstance(quantile, bool) or not isinstance(quantile, numbers.Real) \
            or not 0 <= quantile <= 1:
        raise ValueError(f'{owner}: quantile={quantile!r}: a number in [0, 1]')


def interleaved_times(runs: Sequence[Callable[[], Any]], warmup: int, repeat: int,
                      quantile: float = 0.5) -> List[float]:
    """The ``quantile`` (0.5: median) of each run's milliseconds, the runs timed in
    turn (garbage collection paused)."""
    for run in runs:
        for _ in range(warmup):
            run()
    times: List[List[float]] = [[] for _ in runs]
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            for run, spent in zip(runs, times):
                start = time.perf_counter()
                run()
                spent.append(time.perf_counter() - start)
    finally:
        if enabled:
            gc.enable()
    return [1000 * float(np.quantile(spent, quantile)) for spent in times]


class TorchRuntime(Runtime):
    """PyTorch eager on CPU, ``threads`` intra-op threads."""
    name = 'torch'

    def compile(self, module: nn.Module, inputs: Inputs) -> Callable[[], Any]:
        module = module.eval().to(self.device)
        inputs = inputs_to(inputs, self.device)

        def run() -> Any:
            with torch.no_grad():
                return call_module(module, inputs)
        return run

    def latency(self, modules: Sequence[nn.Module], inputs: Inputs) -> List[float]:
        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            return super().latency(modules, inputs)
        finally:
            torch.set_num_threads(threads)


class CudaRuntime(TorchRuntime):
    """PyTorch on the current CUDA device; every run ends in a synchronisation.

    Eager by default: at batch 1 that times Python's kernel launches more than the GPU
    (6-10 ms for any ResNet-50 or MobileNetV2 on an H100, so a latency budget could not
    be met by pruning).  ``graph=True`` captures each module's forward once in a CUDA
    graph and times its replays: the GPU's work, as a deployment that replays graphs
    (or TensorRT) sees it.  ``dtype`` casts the module and its floating inputs (e.g.
    ``'float16'``) and ``channels_last`` puts 4-d tensors in NHWC, so the figures are
    those of the form deployed; all three are part of the latency table's cache key.

    Args:
        graph: time CUDA-graph replays instead of eager calls.
        dtype: a floating dtype (``'float16'``, ``'bfloat16'``, a ``torch.dtype``) the
            copies timed are cast to; None: as given.
        channels_last: the copies timed and their 4-d inputs in channels_last.
        *args, **kwargs: :class:`Runtime`'s.
    """
    name = 'cuda'
    device = 'cuda'

    def __init__(self, *args: Any, graph: bool = False,
                 dtype: Union[str, torch.dtype, None] = None, channels_last: bool = False,
                 **kwargs: Any):
        if not torch.cuda.is_available():
            raise RuntimeError("runtime 'cuda': torch.cuda.is_available() is False on this "
                               "machine; measure on 'torch' (CPU) or 'onnxruntime' instead")
        super().__init__(*args, **kwargs)
        self.graph, self.channels_last = bool(graph), bool(channels_last)
        self.dtype = None if dtype is None else floating_dtype(dtype)

    def __repr__(self) -> str:
        options = ''.join(f', {k}={v!r}' for k, v in self.options().items())
        return super().__repr__()[:-1] + options + ')'

    def options(self) -> Dict[str, Any]:
        """The options that differ from eager on the given dtype and layout."""
        options: Dict[str, Any] = {}
        if self.graph:
            options['graph'] = True
        if self.dtype is not None:
            options['dtype'] = str(self.dtype).replace('torch.', '')
        if self.channels_last:
            options['channels_last'] = True
        return options

    def versions(self) -> Dict[str, str]:
        return {'torch': torch.__version__, 'cuda': str(torch.version.cuda),
                'gpu': torch.cuda.get_device_name()}

    def compile(self, module: nn.Module, inputs: Inputs) -> Callable[[], Any]:
        module = copy_to(module, self.device, self.dtype).eval()  # the caller's stays as is
        inputs = inputs_to(inputs, self.device)
        if self.dtype is not None:
            inputs = _map_tensors(inputs, lambda x: x.to(self.dtype)
                                  if x.is_floating_point() else x)
        if self.channels_last:
            module = module.to(memory_format=torch.channels_last)
            inputs = _map_tensors(inputs, lambda x: x.contiguous(
                memory_format=torch.channels_last) if x.dim() == 4 else x)
        run = super().compile(module, inputs)  # eager, under no_grad
        if self.graph:
            run = CudaGraphReplay(run)

        def synced() -> Any:
            out = run()
            torch.cuda.synchronize()
            return out
        return synced


def copy_to(module: nn.Module, device: Union[str, torch.device],
            dtype: Union[torch.dtype, None] = None) -> nn.Module:
    """A deep copy of ``module`` whose parameters and buffers are made on ``device`` (the
    floating ones cast to ``dtype`` if given) straight from the originals.

    ``copy.deepcopy(module).to(device)`` first copies every weight on the host, so timing a
    large model on a GPU needed twice its size in host memory; here each weight is copied
    once, to where it runs.  A weight shared by several modules (tied embeddings) stays
    one tensor in the copy; ``requires_grad`` is kept; the original is not touched.

    Example:
        >>> net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
        >>> half = copy_to(net, 'meta', torch.float16)
        >>> half[0].weight.device.type, half[0].weight.dtype, half[1].num_batches_tracked.dtype
        ('meta', torch.float16, torch.int64)
        >>> net[0].weight.device.type, net[0].weight.dtype
        ('cpu', torch.float32)
    """
    def moved(tensor: torch.Tensor) -> torch.Tensor:
        cast = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
        return tensor.detach().to(device=device, dtype=cast, copy=True)

    memo: Dict[int, Any] = {id(p): nn.Parameter(moved(p), requires_grad=p.requires_grad)
                            for p in module.parameters()}
    memo.update({id(b): moved(b) for b in module.buffers()})
    return copy.deepcopy(module, memo)


def floating_dtype(dtype: Union[str, torch.dtype]) -> torch.dtype:
    """A floating ``torch.dtype`` from itself or its name (``'float16'``, ``'torch.half'``).

    Example:
        >>> floating_dtype('float16'), floating_dtype('torch.bfloat16')
        (torch.float16, torch.bfloat16)
        >>> floating_dtype('int8')
        Traceback (most recent call last):
        ...
        ValueError: dtype='int8': a floating dtype ('float16', 'bfloat16', 'float32', ...)
    """
    value = getattr(torch, str(dtype).replace('torch.', ''), None) \
        if isinstance(dtype, str) else dtype
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(f'dtype={dtype!r}: a floating dtype (\'float16\', \'bfloat16\', '
                         "'float32', ...)")
    return value


def _map_tensors(inputs: Inputs, fn: Callable[[torch.Tensor], torch.Tensor]) -> Inputs:
    """``fn`` applied to each input tensor (a mapping's other values as they are)."""
    if isinstance(inputs, Mapping):
        return {k: fn(v) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    return tuple(fn(x) for x in inputs)


class CudaGraphReplay:
    """A function of no arguments captured once in a CUDA graph; calling it replays the
    graph.

    The replay holds ``run`` (and so the module and tensors it closes over): a graph reads
    and writes the memory those had at capture, and replaying it after they were freed
    reads whatever the allocator put there since, or faults (an illegal memory access,
    after which the CUDA context is unusable).  ``warmup`` runs on a side stream come
    first (cuDNN chooses its algorithms there, outside the capture).

    Raises:
        RuntimeError: ``run`` cannot be captured (it synchronises with the host, e.g. a
            data-dependent shape), naming the capture's error.
    """

    def __init__(self, run: Callable[[], Any], warmup: int = 3):
        self.run = run
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                run()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                self.output = run()
        except Exception as err:
            raise RuntimeError(f"runtime 'cuda' with graph=True: the forward cannot be "
                               f'captured in a CUDA graph ({first_line(err)}); time it '
                               'eagerly (graph=False)') from err

    def __call__(self) -> Any:
        """Replay the graph; its output (the tensors captured) is overwritten in place."""
        self.graph.replay()
        return self.output


#: Dtypes onnxruntime's CPU provider lacks kernels for (float64: no Conv; bfloat16: no Conv,
#: no Gemm): :meth:`OnnxRuntime.check` refuses them.
ORT_UNSUPPORTED_DTYPES = (torch.float64, torch.bfloat16)


class OnnxRuntime(Runtime):
    """onnxruntime's CPU provider on the module exported to ONNX, graph optimisations on
    (Conv + BatchNorm + ReLU fused), sequential execution.

    The TorchScript exporter (opset 17) exports it: fast, and enough for the layers of
    the table.  Keyword inputs go through a wrapper that takes the mapping's tensors
    positionally, each an ONNX input of its name (other values are constants).  A module
    the TorchScript exporter fails on (a transformers decoder given ``input_ids`` alone
    reads ``aten::diff`` to find packed sequences) is exported by the dynamo exporter
    (``torch.export``, opset 18: seconds per model), and its class goes there directly
    afterwards; one neither exports raises, naming the runtime, the model and both errors.

    The exported graph is checked against the module once, when it is compiled: a trace
    turns a ``.numpy()`` or ``.item()`` step into a constant, and the graph then times
    less than the model (none of it, when no input is left).  A graph that takes none of
    the model's inputs, or whose outputs on the example inputs, their floating values
    shuffled, differ from the module's (:func:`_graph_problem`), is refused naming the
    model, the difference and what the tracer warned: its figures would not be the model's.

    A model or inputs in float64 or bfloat16 are refused before anything is measured
    (:meth:`check`): onnxruntime's CPU provider has no Conv kernel for either (float64
    fails as ``NOT_IMPLEMENTED: Conv(11)`` only once a session is built).  They are not
    cast to float32: a cast copy is another model, whose latency need not be the one
    asked about.

    Example:
        >>> OnnxRuntime().check(nn.Linear(2, 2).double(), (torch.zeros(1, 2), ))
        Traceback (most recent call last):
        ...
        ValueError: runtime 'onnxruntime': the Linear has torch.float64 weights or inputs, ...
    """
    name = 'onnxruntime'

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._dynamo_classes: set = set()  # classes the TorchScript exporter failed on

    def versions(self) -> Dict[str, str]:
        return {'torch': torch.__version__, 'onnxruntime': _import_onnxruntime().__version__}

    def check(self, model: nn.Module, inputs: Inputs) -> None:
        """Refuse, before anything is measured, a missing onnxruntime and dtypes its CPU
        provider has no kernels for."""
        _import_onnxruntime()
        values = inputs.values() if isinstance(inputs, Mapping) else inputs
        tensors = [t for t in list(model.parameters()) + list(values)
                   if isinstance(t, torch.Tensor)]
        bad = sorted({str(t.dtype) for t in tensors if t.dtype in ORT_UNSUPPORTED_DTYPES})
        if bad:
            raise ValueError(f"runtime 'onnxruntime': the {type(model).__name__} has "
                             f"{' and '.join(bad)} weights or inputs, which onnxruntime's CPU "
                             'provider has no Conv/Gemm kernels for; cast the model and '
                             "inputs to float32 (model.float()) or measure on runtime='torch'")

    def compile(self, module: nn.Module, inputs: Inputs) -> Callable[[], Any]:
        module = module.eval()
        names, tensors = _named_tensors(inputs)
        with torch.no_grad(), without_kv_cache(module):
            exported = self._export(module, inputs)
            session = self._session(module, exported.onnx)
            graph_names = _graph_names(session, module, names)
            problem = _graph_problem(session, module, inputs, tensors, graph_names)
        if problem:
            raise RuntimeError(f"runtime 'onnxruntime': the {type(module).__name__} exported "
                               f'to ONNX is not the model: {problem}{exported.note}. The '
                               'export probably turned part of the forward into constants '
                               '(a .numpy(), .item() or other Python step on a tensor), so '
                               "its latency would not be the model's; measure it on "
                               "runtime='torch' instead")
        feed = _feed(graph_names, tensors)
        return lambda: session.run(None, feed)

    def _session(self, module: nn.Module, onnx_model: bytes) -> Any:
        """An onnxruntime session of ``onnx_model`` (``module`` exported) with this
        runtime's threads, sequential, every graph optimisation on."""
        ort = _import_onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            return ort.InferenceSession(onnx_model, options, providers=['CPUExecutionProvider'])
        except Exception as err:
            raise RuntimeError(f"runtime 'onnxruntime': the {type(module).__name__} exported "
                               f'to ONNX does not load: {first_line(err)}; measure it on '
                               "runtime='torch' instead") from err

    def _export(self, module: nn.Module, inputs: Inputs) -> '_Exported':
        """The module as ONNX: the TorchScript exporter, else the dynamo one."""
        scripted_error = None
        if type(module) not in self._dynamo_classes:
            try:
                return _torchscript_export(module, inputs)
            except Exception as err:  # the dynamo exporter may manage
                scripted_error = err
                self._dynamo_classes.add(type(module))
        try:
            return _Exported(_dynamo_export(module, inputs))
        except Exception as err:
            tried = (f'TorchScript exporter: {first_line(scripted_error)}; '
                     if scripted_error is not None else '')
            raise RuntimeError(f"runtime 'onnxruntime': the {type(module).__name__} cannot be "
                               f'exported to ONNX ({tried}dynamo exporter: '
                               f"{first_line(err)}); measure it on runtime='torch' instead"
                               ) from err


def _import_onnxruntime() -> Any:
    """The onnxruntime module; its absence is said plainly, with the way out, instead of
    a bare ``ModuleNotFoundError`` from deep inside a latency search."""
    try:
        import onnxruntime
    except ImportError as err:
        raise ImportError(f"runtime 'onnxruntime' needs the onnxruntime package, which cannot "
                          f'be imported ({first_line(err)}); install it (pip install '
                          "onnxruntime) or measure on runtime='torch'") from err
    return onnxruntime


class _Exported(NamedTuple):
    """A module exported to ONNX, and what the tracer warned might make the graph differ
    from it (``''``, or a sentence in parentheses for an error message)."""
    onnx: bytes
    note: str = ''


def _graph_names(session: Any, module: nn.Module, names: List[str]) -> List[Optional[str]]:
    """The graph input each model input feeds (None: the graph dropped it): by name, or,
    when the exporter named them its own way (the dynamo exporter: the forward's
    arguments) and there are as many, by position."""
    wanted = [i.name for i in session.get_inputs()]
    if set(wanted) <= set(names):
        return [name if name in wanted else None for name in names]
    if len(wanted) == len(names):
        return wanted
    raise RuntimeError(f"runtime 'onnxruntime': the {type(module).__name__} exported to ONNX "
                       f"takes inputs {wanted}, which do not match the model's {names}; "
                       "measure it on runtime='torch' instead")


def _feed(graph_names: List[Optional[str]], tensors: List[torch.Tensor]) -> Dict[str, Any]:
    """The arrays a session runs on: each tensor under the graph input it feeds."""
    return {name: x.detach().cpu().numpy()
            for name, x in zip(graph_names, tensors) if name is not None}


def _graph_problem(session: Any, module: nn.Module, inputs: Inputs,
                   tensors: List[torch.Tensor], graph_names: List[Optional[str]]) -> str:
    """How the exported graph differs from the module, ``''`` if it does not.

    On the example inputs themselves a trace that froze part of the forward into
    constants still returns the module's outputs (the constants were computed from
    them), so both run on inputs of the same shapes whose floating values, and the
    values of inputs the graph dropped, are shuffled: a graph whose outputs do not move
    with its inputs as the module's do differs there.  One run of each.  With integer
    inputs only nothing is shuffled, and only the outputs' number and shapes are
    compared.  ``tensors`` are the inputs' tensors, in :func:`_named_tensors`' order."""
    if tensors and not any(graph_names):
        return "its graph takes none of the model's inputs"
    generator = torch.Generator().manual_seed(0)
    moved = [x.is_floating_point() or graph is None for x, graph in zip(tensors, graph_names)]
    others = [_shuffled(x, generator) if move else x for x, move in zip(tensors, moved)]
    expected = flatten_tensors(call_module(module, _with_tensors(inputs, others)))
    got = session.run(None, _feed(graph_names, others))
    where = 'on the example inputs with their values shuffled'
    if len(got) != len(expected):
        return f'{where} it returns {len(got)} tensors, the model {len(expected)}'
    for i, (want, have) in enumerate(zip(expected, got)):
        have = torch.from_numpy(np.asarray(have))
        if tuple(have.shape) != tuple(want.shape):
            return (f"{where} its output {i} has shape {tuple(have.shape)}, the model's "
                    f'{tuple(want.shape)}')
        if not any(moved):
            # integer inputs only (token ids, masks): nothing was shuffled, so the values
            # cannot tell a frozen trace, and the exporters may differ where they are
            # undefined (the fully masked rows of a padded batch)
            continue
        error = _relative_error(want.detach().cpu(), have)
        if error > _tolerance(want.dtype):
            return f"{where} its output {i} differs from the model's by {error:.2g} (relative)"
    return ''


def _shuffled(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``x``'s values in another order: other inputs in the range the model was given."""
    order = torch.randperm(x.numel(), generator=generator, device='cpu').to(x.device)
    return x.flatten()[order].view_as(x)


def _with_tensors(inputs: Inputs, tensors: List[torch.Tensor]) -> Inputs:
    """``inputs`` with their tensors replaced, in :func:`_named_tensors`'s order."""
    if not isinstance(inputs, Mapping):
        return tuple(tensors)
    replaced = iter(tensors)
    return {k: next(replaced) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _relative_error(want: torch.Tensor, have: torch.Tensor) -> float:
    """``|have - want| / |want|`` (Euclidean norms, in float64; NaN as 0, infinities as
    +-1e30, so both being NaN at one place is no difference); exact for integers."""
    if not want.is_floating_point():
        return 0.0 if torch.equal(have.to(want.dtype), want) else float('inf')
    want, have = (torch.nan_to_num(x.double(), nan=0.0, posinf=1e30, neginf=-1e30)
                  for x in (want, have))
    difference, scale = float((have - want).norm()), float(want.norm())
    return difference / scale if scale else 0.0 if difference == 0 else float('inf')


def _tolerance(dtype: torch.dtype) -> float:
    """The relative error an export and onnxruntime's fused kernels may add: 1e-3 in
    float32 (a graph that froze part of the forward is off by far more), ten epsilons in
    a coarser dtype."""
    return max(1e-3, 10 * torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


def _named_tensors(inputs: Inputs) -> Tuple[List[str], List[torch.Tensor]]:
    """The input tensors and their ONNX input names (a mapping's keys; ``input_0``...).

    Raises:
        TypeError: a positional input is no tensor (a dict or list of tensors among the
            positional inputs): the graph's inputs are flat, so which tensor feeds which
            could not be told; pass keyword inputs as one dict instead.
    """
    if isinstance(inputs, Mapping):
        pairs = [(k, v) for k, v in inputs.items() if isinstance(v, torch.Tensor)]
        return [k for k, _ in pairs], [v for _, v in pairs]
    for index, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"runtime 'onnxruntime': positional input {index} is a "
                            f'{type(value).__name__}, not a tensor; it times a model called '
                            'on tensors, or on one dict of keyword inputs (tensors and '
                            "constants); measure it on runtime='torch' instead")
    return [f'input_{i}' for i in range(len(inputs))], list(inputs)


class _Positional(nn.Module):
    """``module(**inputs)`` with the mapping's tensors taken positionally (the TorchScript
    exporter traces positional tensors; its keyword arguments' defaults become inputs).

    It starts in the module's mode: the exporter puts the module it is given back in that
    module's mode afterwards, recursively, and a new wrapper in training mode would leave
    the module training (dropout on, batch norms on batch statistics)."""

    def __init__(self, module: nn.Module, inputs: Mapping):
        super().__init__()
        self.module, self.inputs = module, dict(inputs)
        self.training = module.training
        self.keys = [k for k, v in self.inputs.items() if isinstance(v, torch.Tensor)]

    def forward(self, *tensors: torch.Tensor) -> Any:
        return self.module(**{**self.inputs, **dict(zip(self.keys, tensors))})


@contextlib.contextmanager
def _quiet_output() -> Iterator[None]:
    """Discard what native code writes to file descriptors 1 and 2 for a while: the
    TorchScript exporter prints the whole graph to stdout from C++ when it fails (torch
    2.13 turns its log on whatever ``verbose`` says).  Python's own ``sys.stdout`` and
    ``sys.stderr`` are flushed first and keep what is written to them meanwhile."""
    saved = []
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        saved = [(fd, os.dup(fd)) for fd in (1, 2)]
    except (OSError, ValueError, AttributeError):  # no descriptors to quiet
        for _, duplicate in saved:
            os.close(duplicate)
        yield
        return
    try:
        with open(os.devnull, 'w') as devnull:
            for fd, _ in saved:
                os.dup2(devnull.fileno(), fd)
            yield
    finally:
        _flush_c_streams()
        for fd, duplicate in saved:
            os.dup2(duplicate, fd)
            os.close(duplicate)


def _flush_c_streams() -> None:
    """``fflush(NULL)``: what native code buffered goes where its descriptors point now."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):
        pass


def _torchscript_export(module: nn.Module, inputs: Inputs) -> _Exported:
    """The module traced and exported, its inputs named as :func:`_named_tensors` names
    them (a graph drops an input the trace does not use, so names, not positions, say
    which is which); the first tracer warning kept for the check of the graph."""
    names, tensors = _named_tensors(inputs)
    wrapped = _Positional(module, inputs) if isinstance(inputs, Mapping) else module
    buffer = io.BytesIO()
    with warnings.catch_warnings(record=True) as caught, _quiet_output():
        warnings.simplefilter('always')  # TorchScript's deprecation and tracer notices
        torch.onnx.export(wrapped, tuple(tensors), buffer, dynamo=False, opset_version=17,
                          do_constant_folding=True, input_names=names)
    traced = [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    note = (f' (the tracer warned at {Path(traced[0].filename).name}:{traced[0].lineno}: '
            f'{str(traced[0].message).split(". ")[0]})' if traced else '')
    return _Exported(buffer.getvalue(), note)


def _dynamo_export(module: nn.Module, inputs: Inputs) -> bytes:
    args, kwargs = ((), dict(inputs)) if isinstance(inputs, Mapping) else (tuple(inputs), None)
    loggers = [logging.getLogger(name) for name in ('torch.onnx', 'torch.export', 'onnxscript')]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:  # notices of missing torchvision ops, folding attempts
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter('ignore')
            program = torch.onnx.export(module, args, kwargs=kwargs, dynamo=True,
                                        opset_version=18, verbose=False)
        return program.model_proto.SerializeToString()
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


#: Runtime name -> class; :func:`build_runtime` reads it.
RUNTIMES: Dict[str, Type[Runtime]] = {
    'torch': TorchRuntime,
    'cuda': CudaRuntime,
    'onnxruntime': OnnxRuntime,
}

RuntimeArg = Union[str, dict, Runtime]


def build_runtime(runtime: RuntimeArg) -> Runtime:
    """A runtime from its name (``'torch'``, ``'onnxruntime'``, ``'cuda'``), a config dict
    (``dict(type='onnxruntime', threads=1, repeat=30)``) or an instance.

    Raises:
        TypeError: ``runtime`` is none of these (``None`` included), or a config dict
            names a key the runtime does not take (the accepted keys are named).
        ValueError: an unknown runtime name.

    Example:
        >>> build_runtime(dict(type='torch', repeat=50))
        TorchRuntime(threads=1, warmup=5, repeat=50, quantile=0.5)
        >>> build_runtime(dict(type='torch', repeats=3))
        Traceback (most recent call last):
        ...
        TypeError: runtime=dict(type='torch', repeats=3): ... (did you mean 'repeat'?); it takes ...
    """
    if isinstance(runtime, Runtime):
        return runtime
    cls, cfg = check_runtime(runtime)
    return cls(**cfg)


def check_runtime(runtime: Union[str, Mapping]) -> Tuple[Type[Runtime], Dict[str, Any]]:
    """The runtime class a name or config dict names and the keyword arguments it is built
    with, checked without building it (a ``'cuda'`` config is checked on a machine
    without a GPU too), its keys and its ``dtype``.  Raises as :func:`build_runtime`
    does.

    Example:
        >>> check_runtime(dict(type='cuda', graph=True))
        (<class 'razorlib.pruning.runtimes.CudaRuntime'>, {'graph': True})
        >>> check_runtime(dict(type='onnxruntime', graph=True))
        Traceback (most recent call last):
        ...
        TypeError: runtime=dict(type='onnxruntime', graph=True): 'graph' is not a key of ...
        >>> check_runtime(dict(type='cuda', dtype='int8'))
        Traceback (most recent call last):
        ...
        ValueError: dtype='int8': a floating dtype ('float16', 'bfloat16', 'float32', ...)
    """
    if not isinstance(runtime, (str, Mapping)):
        raise TypeError(f'runtime={runtime!r}: a latency budget is measured on a runtime: '
                        f'one of {sorted(RUNTIMES)}, a config dict '
                        "(dict(type='onnxruntime', repeat=30)) or a Runtime instance")
    cfg = dict(type=runtime) if isinstance(runtime, str) else dict(runtime)
    name = cfg.pop('type', None)
    if name not in RUNTIMES:
        hint = ('' if not isinstance(runtime, Mapping) or 'type' in runtime
                else " (the config dict has no 'type')")
        raise ValueError(f'unknown latency runtime {name!r}{hint}; choose one of '
                         f'{sorted(RUNTIMES)} or pass a Runtime instance')
    accepted = keyword_parameters(RUNTIMES[name], through_bases=True) or []
    unknown = [k for k in cfg if k not in accepted]
    if unknown:
        given = ', '.join(f'{k}={v!r}' for k, v in dict(type=name, **cfg).items())
        close = difflib.get_close_matches(str(unknown[0]), accepted, n=1)
        raise TypeError(f'runtime=dict({given}): {", ".join(map(repr, unknown))} '
                        f'{"is not a key" if len(unknown) == 1 else "are not keys"} of the '
                        f'{name} runtime' + (f' (did you mean {close[0]!r}?)' if close else '')
                        + f'; it takes {", ".join(["type"] + accepted)}')
    _check_counts(RUNTIMES[name].__name__, cfg)
    if cfg.get('dtype') is not None:
        floating_dtype(cfg['dtype'])
    return RUNTIMES[name], cfg
