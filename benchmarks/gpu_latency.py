"""GPU latency of dense and slim ResNet-50 / MobileNetV2 in torch (FP32, FP16, BF16) and of
the slim INT8 model through TensorRT.

    python benchmarks/gpu_latency.py [--batches 1 32 128] [--iters 50] [--models ...]

For each model (razorlib's ResNet-50 and MobileNetV2 x1.0 at 224x224, random weights:
latency does not depend on them) and each batch size: the dense model in FP32 and FP16,
and its slim subnet (``razorlib.prune(model, flops=0.5)``: L1 channel pruning to half the
FLOPs) in FP16 and BF16, all in channels_last with cuDNN's benchmark mode on, timed with
CUDA events after a warm-up; then, where TensorRT is installed (``razorlib[tensorrt]``),
the slim model quantized by ``quantize_torch_model`` (TRT_INT8), exported to QDQ ONNX and
built into an INT8 engine by ``tools/deploy.py``'s ``Engine``.  Printed per row: latency
(ms), throughput (images/s), FLOPs, and the latency/FLOPs quotient of the slim model
against the dense one in the same precision (1.0: the latency falls as the FLOPs do).
Targets (issue 13): the slim FP16 quotient within 1.2 at batch 32 and 128; slim INT8 at
or below 0.3x the dense FP16 latency at batch 32 where TensorRT runs.

On a machine without a CUDA GPU it says so in one line and exits with code 0.
"""
import argparse
import copy
import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List

import torch

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    'ResNet-50': dict(type='ResNet', depth=50),
    'MobileNetV2': dict(type='MobileNetV2', widen_factor=1.0),
}


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


def flops_of(model: torch.nn.Module) -> float:
    from razorlib.utils import get_model_complexity
    return float(get_model_complexity(model, torch.randn(1, 3, 224, 224)).flops)


def torch_runner(model: torch.nn.Module, dtype: torch.dtype, batch: int) -> Callable[[], object]:
    net = copy.deepcopy(model).cuda().to(dtype=dtype, memory_format=torch.channels_last)
    images = torch.randn(batch, 3, 224, 224, device='cuda', dtype=dtype).contiguous(
        memory_format=torch.channels_last)

    def run():
        with torch.inference_mode():
            return net(images)
    return run


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--batches', type=int, nargs='+', default=[1, 32, 128])
    parser.add_argument('--iters', type=int, default=50)
    parser.add_argument('--models', nargs='+', default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print('benchmarks/gpu_latency.py: no CUDA GPU on this machine; nothing measured')
        return 0
    import razorlib
    torch.backends.cudnn.benchmark = True
    trt = importlib.util.find_spec('tensorrt') is not None
    print(f'device: {torch.cuda.get_device_name()}, torch {torch.__version__}, '
          f'TensorRT {"present" if trt else "not installed: no INT8 rows"}')
    print('| model | variant | batch | latency ms | images/s | GFLOPs | quotient vs dense |')
    print('|---|---|---:|---:|---:|---:|---:|')
    for name in args.models:
        torch.manual_seed(0)
        dense = build(MODELS[name])
        slim = razorlib.prune(copy.deepcopy(dense), torch.randn(1, 3, 224, 224), flops=0.5)
        flops = {'dense': flops_of(dense), 'slim': flops_of(slim)}
        for batch in args.batches:
            times: Dict[str, float] = {}
            variants: List = [('dense', 'FP32', torch.float32), ('dense', 'FP16', torch.float16),
                              ('slim', 'FP16', torch.float16), ('slim', 'BF16', torch.bfloat16),
                              ('dense', 'BF16', torch.bfloat16)]
            for which, label, dtype in variants:
                model = dense if which == 'dense' else slim
                times[f'{which} {label}'] = cuda_time_ms(torch_runner(model, dtype, batch),
                                                         args.iters)
            if trt:
                times['slim INT8 (TensorRT)'] = cuda_time_ms(trt_int8_runner(slim, batch),
                                                             args.iters)
            for key, ms in times.items():
                which, precision = key.split(' ', 1)
                dense_key = f'dense {precision}'
                quotient = ''
                if which == 'slim' and dense_key in times:
                    quotient = (f'{(ms / times[dense_key]) / (flops["slim"] / flops["dense"]):.2f}')
                elif which == 'slim':
                    quotient = f'{ms / times["dense FP16"]:.2f}x dense FP16'
                print(f'| {name} | {key} | {batch} | {ms:.3f} | {batch * 1000 / ms:.0f} | '
                      f'{flops[which] / 1e9:.2f} | {quotient} |', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
