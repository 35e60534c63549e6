"""GPU latency of dense and slim ResNet-50 / MobileNetV2 in torch (FP32, FP16, BF16) and of
the slim INT8 model through TensorRT.

    python benchmarks/gpu_latency.py [--batches 1 32 128] [--iters 50] [--models ...]
                                     [--round-to 1 8] [--modes eager graph folded compiled]
                                     [--precisions FP32 FP16 BF16] [--latency 0.5]

For each model (razorlib's ResNet-50 and MobileNetV2 x1.0 at 224x224, random weights:
latency does not depend on them) and each batch size: the dense model in FP32, FP16 and
BF16, and its slim subnets (``razorlib.prune(model, flops=0.5, round_to=n)``: L1 channel
pruning to half the FLOPs, kept widths multiples of each ``--round-to`` n; 8 suits tensor
cores) in FP16 and BF16, all in channels_last with cuDNN's benchmark mode on, timed with
CUDA events after a warm-up, each in three ways.  With ``--latency F``, also at each batch
size a slim model pruned to a *latency* budget: ``razorlib.prune(model, images,
latency=F, round_to=n)`` (the last ``--round-to`` n) measured on the ``'cuda'`` runtime as
deployed (``graph=True, dtype='float16', channels_last=True``, at that batch), printed
with its latency fraction measured afterwards on that runtime (the budget holds within
5% if it is at most 1.05 F) and timed in the table like the others:

- ``eager``: ``model(images)`` under ``torch.no_grad()``; at small batches this times
  Python's kernel launches more than the GPU;
- ``graph``: the same forward captured once in a CUDA graph and replayed: the GPU's work
  alone, every BatchNorm and activation still a kernel of its own;
- ``folded``: the model traced and frozen by TorchScript (``torch.jit.freeze`` folds each
  BatchNorm into its conv), then captured in a CUDA graph: the form a deployment runs;
- ``compiled`` (not in the default ``--modes``: minutes of compiling per row):
  ``torch.compile`` with inductor's freezing (BatchNorm folded, activations and adds fused
  into Triton kernels), static shapes (``dynamic=False``, dynamo reset before each
  compile), then captured in a CUDA graph.

Then, where TensorRT is installed (``razorlib[tensorrt]``), each slim model quantized by
``quantize_torch_model`` (TRT_INT8), exported to QDQ ONNX and built into an INT8 engine by
``tools/deploy.py``'s ``Engine``.  Printed per row: FLOPs, latency (ms) per mode,
throughput (images/s) of the last mode, and per mode the latency/FLOPs quotient of the
slim model against the dense one in the same precision (1.0: the latency falls as the
FLOPs do).  A mode that fails for a row prints its error there and the run goes on.
Targets (issue 13): the slim FP16 quotient within 1.2 at batch 32 and 128; slim INT8 at
or below 0.3x the dense FP16 latency at batch 32 where TensorRT runs.

On a machine without a CUDA GPU it says so in one line and exits with code 0.
"""
import argparse
import copy
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Tuple, Union

import torch

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    'ResNet-50': dict(type='ResNet', depth=50),
    'MobileNetV2': dict(type='MobileNetV2', widen_factor=1.0),
}
PRECISIONS = {'FP32': torch.float32, 'FP16': torch.float16, 'BF16': torch.bfloat16}
MODES = ('eager', 'graph', 'folded', 'compiled')


def cuda_time_ms(run: Callable[[], object], iters: int, warmup: int = 10) -> float:
    """Mean milliseconds of ``run()`` over ``iters`` calls, timed with CUDA events."""
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def build(backbone: dict) -> torch.nn.Module:
    from razorlib.models import ImageClassifier
    return ImageClassifier(backbone, dict(type='LinearClsHead', num_classes=1000)).eval()


def latency_pruned(dense: torch.nn.Module, fraction: float, batch: int,
                   round_to: int) -> Tuple[torch.nn.Module, float]:
    """``dense`` pruned to ``fraction`` of its FP16 CUDA-graph latency at ``batch``, and the
    slim model's latency over the dense one's measured afterwards on the same runtime."""
    import razorlib
    from razorlib.pruning.runtimes import CudaRuntime
    runtime = CudaRuntime(graph=True, dtype='float16', channels_last=True)
    images = torch.randn(batch, 3, 224, 224)
    # neither call changes its modules: prune returns a slim copy, the runtime times copies
    slim = razorlib.prune(dense, images, latency=fraction, runtime=runtime, round_to=round_to)
    dense_ms, slim_ms = runtime.latency([dense, slim], (images, ))
    return slim, slim_ms / dense_ms


def flops_of(model: torch.nn.Module) -> float:
    from razorlib.utils import get_model_complexity
    return float(get_model_complexity(model, torch.randn(1, 3, 224, 224)).flops)


def torch_runner(model: torch.nn.Module, dtype: torch.dtype, batch: int,
                 mode: str) -> Callable[[], object]:
    """``model`` on the GPU in ``dtype`` and channels_last, run as ``mode`` says."""
    from razorlib.pruning.runtimes import CudaGraphReplay
    net = copy.deepcopy(model).cuda().to(dtype=dtype, memory_format=torch.channels_last)
    images = torch.randn(batch, 3, 224, 224, device='cuda', dtype=dtype).contiguous(
        memory_format=torch.channels_last)
    if mode == 'folded':
        with torch.no_grad():
            net = torch.jit.freeze(torch.jit.trace(net, images))
    elif mode == 'compiled':
        # (imported from torch: `import torch._dynamo` here would make `torch` a local name
        # of the whole function, unbound before this line)
        from torch import _dynamo
        from torch._inductor import config as inductor
        inductor.freezing = True
        # dynamo's cache outlives a compile: without the reset, the second batch size of
        # the same model class recompiles with a dynamic batch dimension
        _dynamo.reset()
        net = torch.compile(net, dynamic=False)

    def run():
        with torch.no_grad():
            return net(images)
    # the replay holds run, and with it the net and images the graph reads
    return run if mode == 'eager' else CudaGraphReplay(run, warmup=5)


def trt_int8_runner(model: torch.nn.Module, batch: int) -> Callable[[], object]:
    """The INT8 TensorRT engine of ``model`` (PTQ on random images), run at ``batch``."""
    from razorlib.quantization import export_graph, quantize_torch_model
    spec = importlib.util.spec_from_file_location('deploy_tool', REPO / 'tools' / 'deploy.py')
    deploy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(deploy)
    images = [torch.randn(8, 3, 224, 224) for _ in range(4)]
    graph = quantize_torch_model(model, images, images[0], 'TRT_INT8', calib_steps=4,
                                 progress=False)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / 'int8.onnx'
        export_graph(graph, path)
        engine = deploy.Engine(path, True, batch, 2048)
    x = torch.randn(batch, 3, 224, 224, device='cuda')
    return lambda: engine(x)


def measure(run: Callable[[], Callable[[], object]], iters: int) -> Union[float, str]:
    """Milliseconds of the runner ``run()`` builds, or why it could not be built or run."""
    try:
        return cuda_time_ms(run(), iters)
    except Exception as err:  # one failing mode must not end the whole table
        return f'{type(err).__name__}: {str(err).splitlines()[0][:80]}'


def cell(value: Union[float, str]) -> str:
    return f'{value:.3f}' if isinstance(value, float) else f'failed ({value})'


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--batches', type=int, nargs='+', default=[1, 32, 128])
    parser.add_argument('--iters', type=int, default=50)
    parser.add_argument('--models', nargs='+', default=list(MODELS), choices=list(MODELS))
    parser.add_argument('--round-to', type=int, nargs='+', default=[1, 8],
                        help='one slim model per value: kept widths multiples of it')
    parser.add_argument('--modes', nargs='+', default=list(MODES[:3]), choices=MODES)
    parser.add_argument('--precisions', nargs='+', default=list(PRECISIONS),
                        choices=list(PRECISIONS), help='FP32 is timed for the dense model only')
    parser.add_argument('--latency', type=float, metavar='F',
                        help="also a slim model per batch pruned to this fraction of the dense "
                        "model's FP16 CUDA-graph latency at that batch")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print('benchmarks/gpu_latency.py: no CUDA GPU on this machine; nothing measured')
        return 0
    import razorlib
    torch.backends.cudnn.benchmark = True
    trt = importlib.util.find_spec('tensorrt') is not None
    print(f'device: {torch.cuda.get_device_name()}, torch {torch.__version__}, '
          f'TensorRT {"present" if trt else "not installed: no INT8 rows"}')
    modes = args.modes
    print(f'| model | variant | batch | GFLOPs | {" | ".join(f"{m} ms" for m in modes)} | '
          f'images/s ({modes[-1]}) | {" | ".join(f"quotient {m}" for m in modes)} |')
    print('|---|---|---:|---:|' + '---:|' * (2 * len(modes) + 1))
    for name in args.models:
        torch.manual_seed(0)
        models = {'dense': build(MODELS[name])}
        for n in args.round_to:
            models[f'slim round_to={n}'] = razorlib.prune(
                models['dense'], torch.randn(1, 3, 224, 224), flops=0.5, round_to=n)
        flops = {key: flops_of(model) for key, model in models.items()}
        for batch in args.batches:
            models = {k: m for k, m in models.items() if not k.startswith('slim latency')}
            if args.latency is not None:
                key = f'slim latency={args.latency:g} round_to={args.round_to[-1]}'
                start = time.perf_counter()
                try:
                    models[key], measured = latency_pruned(models['dense'], args.latency,
                                                           batch, args.round_to[-1])
                except Exception as err:  # an unreachable budget: the other rows still run
                    print(f'{name} batch {batch}: pruning to latency {args.latency:g} failed: '
                          f'{type(err).__name__}: {err}', flush=True)
                else:
                    flops[key] = flops_of(models[key])
                    print(f'{name} batch {batch}: pruned to latency {args.latency:g} on the '
                          f'cuda runtime (graph, float16, channels_last) in '
                          f'{time.perf_counter() - start:.0f} s; measured afterwards on it: '
                          f'{measured:.3f} of dense; FLOPs {flops[key] / flops["dense"]:.3f}',
                          flush=True)
            times: Dict[Tuple[str, str], Dict[str, Union[float, str]]] = {}
            for key, model in models.items():
                for label in args.precisions:
                    dtype = PRECISIONS[label]
                    if key == 'dense' or label != 'FP32':
                        times[key, label] = {mode: measure(
                            lambda: torch_runner(model, dtype, batch, mode), args.iters)
                            for mode in modes}
            for (key, label), row in times.items():
                dense = times.get(('dense', label), {})
                quotients = []
                for mode in modes:
                    both = isinstance(row[mode], float) and isinstance(dense.get(mode), float)
                    quotients.append(
                        f'{(row[mode] / dense[mode]) / (flops[key] / flops["dense"]):.2f}'
                        if key != 'dense' and both else '')
                last = row[modes[-1]]
                rate = f'{batch * 1000 / last:.0f}' if isinstance(last, float) else ''
                print(f'| {name} | {key} {label} | {batch} | {flops[key] / 1e9:.2f} | '
                      f'{" | ".join(cell(row[m]) for m in modes)} | {rate} | '
                      f'{" | ".join(quotients)} |', flush=True)
            for key, model in models.items():
                if trt and key != 'dense':
                    ms = measure(lambda: trt_int8_runner(model, batch), args.iters)
                    # the dense FP16 row exists only when FP16 is among --precisions
                    base = times.get(('dense', 'FP16'), {}).get(modes[-1])
                    versus = (f'{ms / base:.2f}x dense FP16 {modes[-1]}'
                              if isinstance(ms, float) and isinstance(base, float) else '')
                    print(f'| {name} | {key} INT8 (TensorRT engine) | {batch} | '
                          f'{flops[key] / 1e9:.2f} | {cell(ms)} | {versus} |', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
