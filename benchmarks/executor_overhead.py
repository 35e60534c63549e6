"""Overhead of ``razorlib.ir.TorchExecutor`` over eager PyTorch, in one run.

Each model is exported with ``razorlib.ir.from_torch`` (the dynamo exporter, whose
optimizer fuses Conv+BatchNorm) and run by the executor; eager is the same ``nn.Module``
in eval mode under ``torch.no_grad()``.  BatchNorm statistics are random, so that the
relative error of the executor's output (also printed) means something.  Eager and
executor runs alternate so that load from other processes hits both alike; times are
medians of ``--repeat`` runs after a warm-up, *ratio* is executor / eager of the medians
and *best* of the fastest runs (the least disturbed by other load).  The exported graph
has BatchNorm folded into the convolutions, the eager module has not: *folded ms* is
eager PyTorch running the same module with its BatchNorms folded too
(``torch.fx.experimental.optimization.fuse``), timed in the same alternation, and
*ratio folded* executor / that, the executor's overhead alone.  The *loop* column
is the interpreter alone: the executor with every kernel replaced by a lookup of its
recorded outputs (gathering inputs, checking hooks, freeing intermediates).

    python benchmarks/executor_overhead.py [--repeat 10] [--batch 8] [--size 224]
                                           [--device cpu|cuda]

With ``--device cuda`` the model, the input and the executor's kernels are on the GPU
and each timed run ends with ``torch.cuda.synchronize()``.
"""
import argparse
import platform
import statistics
import time
from typing import Callable, Dict, List

import torch

from torch.fx.experimental.optimization import fuse

from razorlib.ir import Operation, TorchExecutor, from_torch
from razorlib.models import MobileNetV2, ResNet

MODELS: Dict[str, Callable[[], torch.nn.Module]] = {
    'ResNet-50': lambda: ResNet(depth=50, num_classes=1000),
    'MobileNetV2': lambda: MobileNetV2(num_classes=1000),
}


class LoopOnly(TorchExecutor):
    """The executor's loop with kernels replaced by their recorded outputs."""

    def __init__(self, executor: TorchExecutor, x: torch.Tensor) -> None:
        super().__init__(executor.graph, executor.device)
        self.recorded: Dict[Operation, List[torch.Tensor]] = {}
        handle = executor.register_forward_hook(
            lambda op, inputs, outputs: self.recorded.__setitem__(op, outputs))
        executor(x)
        handle.remove()

    def run_operation(self, op, inputs):
        return self.recorded[op]


@torch.no_grad()
def randomize_norms(model: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial BatchNorm statistics and affine values, so the outputs check something."""
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.normal_(0, 0.1)
            module.running_var.uniform_(0.5, 1.5)
            module.weight.uniform_(0.5, 1.5)
            module.bias.normal_(0, 0.1)
    return model


def timed(function: Callable[[], object], device: str) -> float:
    start = time.perf_counter()
    function()
    if device == 'cuda':
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(name: str, batch: int, size: int, repeat: int, device: str) -> str:
    torch.manual_seed(0)
    model = randomize_norms(MODELS[name]()).eval()
    x = torch.randn(batch, 3, size, size)
    start = time.perf_counter()
    graph = from_torch(model, x)
    export_s = time.perf_counter() - start
    folded = fuse(model)  # a copy, BatchNorm folded into the convolutions as in the graph
    model, folded, x = model.to(device), folded.to(device), x.to(device)
    executor = TorchExecutor(graph, device)
    loop = LoopOnly(executor, x)
    with torch.no_grad():
        expected = model(x)
    error = ((executor(x)[0] - expected).abs().max() / expected.abs().max()).item()
    runs = {'eager': lambda: model(x), 'executor': lambda: executor(x), 'loop': lambda: loop(x),
            'folded': lambda: folded(x)}
    with torch.no_grad():
        for run in runs.values():  # warm-up
            run()
        times = {key: [] for key in runs}
        for _ in range(repeat):
            for key, run in runs.items():
                times[key].append(timed(run, device))
    eager, ours, loop_s, folded_s = (statistics.median(times[key])
                                     for key in ('eager', 'executor', 'loop', 'folded'))
    best = min(times['executor']) / min(times['eager'])
    return (f'{name:<12}{len(graph.operations):>5}{export_s:>9.1f}{1000 * eager:>10.1f}'
            f'{1000 * ours:>12.1f}{ours / eager:>8.2f}{best:>7.2f}{1000 * loop_s:>9.2f}'
            f'{error:>11.1e}{1000 * folded_s:>11.1f}{ours / folded_s:>14.2f}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeat', type=int, default=10)
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--size', type=int, default=224)
    parser.add_argument('--device', default='cpu', choices=['cpu', 'cuda'])
    args = parser.parse_args()
    where = (torch.cuda.get_device_name() if args.device == 'cuda' else
             f'{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads')
    print(f'machine: {where}, torch {torch.__version__}')
    print(f'input {args.batch}x3x{args.size}x{args.size}, median of {args.repeat} '
          'alternating runs\n')
    header = (f"{'model':<12}{'ops':>5}{'export s':>9}{'eager ms':>10}{'executor ms':>12}"
              f"{'ratio':>8}{'best':>7}{'loop ms':>9}{'rel. err':>11}{'folded ms':>11}"
              f"{'ratio folded':>14}")
    print(header)
    print('-' * len(header))
    for name in MODELS:
        print(measure(name, args.batch, args.size, args.repeat, args.device), flush=True)


if __name__ == '__main__':
    main()
