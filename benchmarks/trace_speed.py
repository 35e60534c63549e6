"""Time of building channel groups: razorlib vs Torch-Pruning, side by side in one run.

Measures ``StructurePruner.prepare_from_supernet`` (one shape-only forward, the autograd
walk, the groups, the size-dependence check and the masks) next to Torch-Pruning's
``DependencyGraph().build_dependency`` (a real forward and its graph) on ResNet-50/101/152
and on compact copies of torchvision's DenseNet-121, EfficientNet-B0, RegNetY-400MF,
MobileNetV2, MNASNet-1.0, ConvNeXt-T, ViT-B/16, ShuffleNetV2 and GoogLeNet
(``benchmarks/tv_models.py``), at 1x3xSxS.  The two run alternately, ``--repeat`` times
after a warm-up, and each figure is the median; the summary is the geometric mean of the
ratios.  Beside them: the whole ``razorlib.prune(model, x, ratio=0.5)`` call (copy,
trace, scores, allocation, slicing, the check run of the slim model) and one real
forward of the model under ``no_grad``.  Torch-Pruning needs ``pip install -r
requirements/dev.txt``; its time is mostly a real forward, which more threads speed up,
while razorlib's forward is shape-only, so ``--threads`` moves the ratios: report it.

    OMP_NUM_THREADS=1 python benchmarks/trace_speed.py [--repeat 7] [--threads 1]
"""
import argparse
import math
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Callable, Dict, List

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import razorlib  # noqa: E402
from razorlib.models import ResNet  # noqa: E402
from razorlib.pruning import L1NormPruner, remove_masks  # noqa: E402
from tv_models import MODELS  # noqa: E402

try:
    import torch_pruning
except ImportError:  # optional peer
    torch_pruning = None


def time_razorlib(model: nn.Module, x: torch.Tensor) -> float:
    start = time.perf_counter()
    L1NormPruner(ratio=0.5).prepare_from_supernet(model, x)
    elapsed = time.perf_counter() - start
    remove_masks(model)
    return elapsed


def time_torch_pruning(model: nn.Module, x: torch.Tensor) -> float:
    start = time.perf_counter()
    torch_pruning.DependencyGraph().build_dependency(model, example_inputs=x)
    return time.perf_counter() - start


def time_prune(model: nn.Module, x: torch.Tensor) -> float:
    start = time.perf_counter()
    razorlib.prune(model, x, ratio=0.5)
    return time.perf_counter() - start


def time_forward(model: nn.Module, x: torch.Tensor) -> float:
    start = time.perf_counter()
    with torch.no_grad():
        model(x)
    return time.perf_counter() - start


def alternating(fns: Dict[str, Callable[[], float]], repeat: int) -> Dict[str, float]:
    """Median time of each function, run in turn ``repeat`` times after a warm-up; a
    function that raises is reported as the error's name."""
    times: Dict[str, List[float]] = {name: [] for name in fns}
    failed: Dict[str, str] = {}
    for round_ in range(repeat + 1):
        for name, fn in fns.items():
            if name in failed:
                continue
            try:
                elapsed = fn()
            except Exception as err:  # the peer may not handle a model
                failed[name] = type(err).__name__
                continue
            if round_:
                times[name].append(elapsed)
    return {name: failed.get(name) or statistics.median(times[name]) for name in fns}


def builders() -> Dict[str, Callable[[], nn.Module]]:
    resnets = {f'ResNet-{d}': (lambda d=d: ResNet(depth=d, num_classes=1000))
               for d in (50, 101, 152)}
    return {**resnets, **MODELS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeat', type=int, default=7)
    parser.add_argument('--prune-repeat', type=int, default=3,
                        help='runs of the whole razorlib.prune call (slower)')
    parser.add_argument('--size', type=int, default=224)
    parser.add_argument('--threads', type=int, default=torch.get_num_threads(),
                        help='torch threads (default: all cores)')
    parser.add_argument('--models', nargs='*', help='names to run (default: all)')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings('ignore')
    print(f'machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, '
          f'load {os.getloadavg()[0]:.1f}, {torch.get_num_threads()} threads, '
          f'torch {torch.__version__}, torch-pruning '
          f'{getattr(torch_pruning, "__version__", "not installed")}')
    print(f'input 1x3x{args.size}x{args.size}, median of {args.repeat} alternating runs\n')
    header = (f"{'model':<17}{'modules':>8}{'razorlib s':>11}{'ms/module':>10}"
              f"{'torch-pruning s':>16}{'ratio':>7}{'prune s':>9}{'forward s':>10}"
              f"{'prune/(trace+fwd)':>18}")
    print(header)
    print('-' * len(header))
    x = torch.randn(1, 3, args.size, args.size)
    ratios: List[float] = []
    for name, build in builders().items():
        if args.models and name not in args.models:
            continue
        model = build().eval()
        modules = sum(1 for _ in model.modules())
        fns = {'ours': lambda: time_razorlib(model, x)}
        if torch_pruning is not None:
            fns['peer'] = lambda: time_torch_pruning(model, x)
        times = alternating(fns, args.repeat)
        slow = alternating({'prune': lambda: time_prune(model, x),
                            'forward': lambda: time_forward(model, x)}, args.prune_repeat)
        ours, peer = times['ours'], times.get('peer')
        row = f'{name:<17}{modules:>8}{ours:>11.3f}{1000 * ours / modules:>10.3f}'
        if isinstance(peer, float):
            ratio = ours / peer
            ratios.append(ratio)
            row += f'{peer:>16.3f}{ratio:>7.2f}'
        else:
            row += f'{"fails: " + (peer or "n/a") if peer else "n/a":>23}'
        prune, forward = slow['prune'], slow['forward']
        print(f'{row}{prune:>9.3f}{forward:>10.3f}{prune / (ours + forward):>18.2f}',
              flush=True)
    if ratios:
        mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f'\ngeometric mean of {len(ratios)} ratios: {mean:.2f}; '
              f'largest ratio: {max(ratios):.2f}')


if __name__ == '__main__':
    main()
