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
``'cuda'``          the same on the current CUDA device, synchronised per run
``'onnxruntime'``   the module exported to ONNX (TorchScript exporter), on
                    onnxruntime's CPU provider with every graph optimisation
==================  =========================================================
"""
import gc
import io
import os
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple, Type, Union

import numpy as np
import torch
import torch.nn as nn

__all__ = ['RUNTIMES', 'Runtime', 'TorchRuntime', 'CudaRuntime', 'OnnxRuntime',
           'build_runtime', 'RuntimeArg', 'default_cache_dir']

Inputs = Tuple[torch.Tensor, ...]


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
        if threads < 1 or warmup < 0 or repeat < 1 or not 0 <= quantile <= 1:
            raise ValueError(f'{type(self).__name__}: threads >= 1, warmup >= 0, repeat >= 1 '
                             f'and quantile in [0, 1], got {threads}, {warmup}, {repeat}, '
                             f'{quantile}')
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

    def key_fields(self) -> Dict[str, Any]:
        """What makes figures of two runtimes comparable: name, device, threads, the
        quantile reported and the software versions."""
        return dict(runtime=self.name, device=self.device, threads=self.threads,
                    quantile=self.quantile, versions=self.versions())

    def compile(self, module: nn.Module, inputs: Inputs) -> Callable[[], Any]:
        """A function of no arguments that runs ``module`` on ``inputs`` once."""
        raise NotImplementedError(f'{type(self).__name__} must override compile() or '
                                  'latency()')

    def latency(self, modules: Sequence[nn.Module], inputs: Inputs) -> List[float]:
        """Milliseconds (the :attr:`quantile` of ``repeat`` runs; the median by default)
        of one call of each module on ``inputs``, the modules' runs interleaved."""
        runs = [self.compile(module, inputs) for module in modules]
        return interleaved_times(runs, self.warmup, self.repeat, self.quantile)


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
        inputs = tuple(x.to(self.device) for x in inputs)

        def run() -> Any:
            with torch.no_grad():
                return module(*inputs)
        return run

    def latency(self, modules: Sequence[nn.Module], inputs: Inputs) -> List[float]:
        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            return super().latency(modules, inputs)
        finally:
            torch.set_num_threads(threads)


class CudaRuntime(TorchRuntime):
    """PyTorch eager on the current CUDA device; every run ends in a synchronisation."""
    name = 'cuda'
    device = 'cuda'

    def __init__(self, *args: Any, **kwargs: Any):
        if not torch.cuda.is_available():
            raise RuntimeError("runtime 'cuda': torch.cuda.is_available() is False on this "
                               "machine; measure on 'torch' (CPU) or 'onnxruntime' instead")
        super().__init__(*args, **kwargs)

    def versions(self) -> Dict[str, str]:
        return {'torch': torch.__version__, 'cuda': str(torch.version.cuda),
                'gpu': torch.cuda.get_device_name()}

    def compile(self, module: nn.Module, inputs: Inputs) -> Callable[[], Any]:
        run = super().compile(module, inputs)

        def synced() -> Any:
            out = run()
            torch.cuda.synchronize()
            return out
        return synced


class OnnxRuntime(Runtime):
    """onnxruntime's CPU provider on the module exported to ONNX (opset 17,
    TorchScript exporter: fast, and enough for the convolutional layers timed here),
    graph optimisations on (Conv + BatchNorm + ReLU fused), sequential execution."""
    name = 'onnxruntime'

    def versions(self) -> Dict[str, str]:
        import onnxruntime
        return {'torch': torch.__version__, 'onnxruntime': onnxruntime.__version__}

    def compile(self, module: nn.Module, inputs: Inputs) -> Callable[[], Any]:
        import onnxruntime as ort

        buffer = io.BytesIO()
        module = module.eval()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter('ignore', DeprecationWarning)  # TorchScript's notices
            torch.onnx.export(module, tuple(inputs), buffer, dynamo=False, opset_version=17,
                              do_constant_folding=True)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(buffer.getvalue(), options,
                                       providers=['CPUExecutionProvider'])
        feed = {i.name: x.detach().cpu().numpy()
                for i, x in zip(session.get_inputs(), inputs)}
        return lambda: session.run(None, feed)


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

    Example:
        >>> build_runtime(dict(type='torch', repeat=50))
        TorchRuntime(threads=1, warmup=5, repeat=50, quantile=0.5)
    """
    if isinstance(runtime, Runtime):
        return runtime
    cfg = dict(type=runtime) if isinstance(runtime, str) else dict(runtime)
    name = cfg.pop('type', None)
    if name not in RUNTIMES:
        raise ValueError(f'unknown latency runtime {name!r}; choose one of '
                         f'{sorted(RUNTIMES)} or pass a Runtime instance')
    return RUNTIMES[name](**cfg)
