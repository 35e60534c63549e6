"""Time of building channel groups: razorlib vs Torch-Pruning, side by side in one run.

Measures ``StructurePruner.prepare_from_supernet`` (one forward, the autograd walk, the
groups and the masks) on ResNet-50 at 224x224 and on ResNet-50/101/152, next to
Torch-Pruning's ``DependencyGraph().build_dependency`` (its forward and its graph) on the
same model and input, when ``torch-pruning`` is installed (``pip install -r
requirements/dev.txt``).  Each figure is the median of ``--repeat`` runs after a warm-up.
Torch-Pruning's time is mostly a real forward, which more threads speed up; razorlib's
forward is shape-only, so ``--threads`` changes the ratio: report it.

    python benchmarks/trace_speed.py [--repeat 5] [--size 224] [--threads N]
"""
import argparse
import platform
import statistics
import time

import torch

from razorlib.models import ResNet
from razorlib.pruning import L1NormPruner, remove_masks

try:
    import torch_pruning
except ImportError:  # optional peer
    torch_pruning = None


def time_razorlib(model, x) -> float:
    start = time.perf_counter()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    elapsed = time.perf_counter() - start
    remove_masks(model)
    return elapsed


def time_torch_pruning(model, x) -> float:
    start = time.perf_counter()
    torch_pruning.DependencyGraph().build_dependency(model, example_inputs=x)
    return time.perf_counter() - start


def median_time(fn, model, x, repeat: int) -> float:
    fn(model, x)  # warm-up
    return statistics.median(fn(model, x) for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--size', type=int, default=224)
    parser.add_argument('--threads', type=int, default=torch.get_num_threads(),
                        help='torch threads (default: all cores)')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f'machine: {platform.processor() or platform.machine()}, '
          f'{torch.get_num_threads()} threads, torch {torch.__version__}')
    print(f'input 1x3x{args.size}x{args.size}, median of {args.repeat} runs\n')
    header = (f"{'model':<11}{'modules':>8}{'razorlib s':>12}{'ms/module':>11}"
              f"{'torch-pruning s':>17}{'ratio':>8}")
    print(header)
    print('-' * len(header))
    x = torch.randn(1, 3, args.size, args.size)
    for depth in (50, 101, 152):
        model = ResNet(depth=depth, num_classes=1000).eval()
        ours = median_time(time_razorlib, model, x, args.repeat)
        modules = sum(1 for _ in model.modules())
        row = f'ResNet-{depth:<4}{modules:>8}{ours:>12.3f}{1000 * ours / modules:>11.3f}'
        if torch_pruning is not None:
            peer = median_time(time_torch_pruning, model, x, args.repeat)
            print(f'{row}{peer:>17.3f}{ours / peer:>8.2f}')
        else:
            print(f'{row}{"(not installed)":>17}')


if __name__ == '__main__':
    main()
