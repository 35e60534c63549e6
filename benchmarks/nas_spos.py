"""SPOS on the digits: supernet + evolution search vs random subnets of the same budget.

Runs the SPOS pipeline of ``configs/nas/spos`` (the supernet with ``tools/train.py``, the
evolution search with ``tools/search.py``, ranking candidates on the validation split),
then trains from scratch, with the subnet config and the same schedule and seeds, the
searched subnet and ``--random`` subnets drawn uniformly under the search's FLOPs
budget, and reports each one's top-1 on the held-out test split: the random subnets'
mean and standard deviation next to the searched subnet's.  Wall times are printed
for the SPOS pipeline (supernet, search, retraining the searched subnet) and in all.

    OMP_NUM_THREADS=1 python benchmarks/nas_spos.py [--random 10] [--seeds 0] \\
        [--search-options search_cfg.score_key=accuracy/nll ...] \\
        [--random-from work_dirs/nas_spos_benchmark/nas_spos.json] [--overwrite]

``--random-from`` takes the random subnets' results from an earlier run's json (trained
with the same seeds and schedule) instead of training ``--random`` new ones, so a second
search (e.g. loss-ranked) is judged against the same random subnets.  The results go to
``<work-dir>/nas_spos.json``; if that file exists, the run stops before training anything
unless ``--overwrite`` is given.
"""
import argparse
import importlib.util
import json
import random
import statistics
import time
from pathlib import Path
from typing import Dict, List, Sequence

import torch
from mmengine.config import Config
from mmengine.runner import Runner

from razorlib.nas import FixedSubnet, NasMutator, fix_subnet
from razorlib.registry import MODELS
from razorlib.utils import get_model_complexity

REPO = Path(__file__).parents[1]
CONFIGS = REPO / 'configs' / 'nas' / 'spos'


def tool(name: str):
    spec = importlib.util.spec_from_file_location(f'{name}_tool', REPO / 'tools' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_subnets(count: int, budget: float, seed: int) -> List[Dict]:
    """``count`` distinct uniform samples of the search space within ``budget`` FLOPs."""
    cfg = Config.fromfile(str(CONFIGS / 'spos_shufflenet_digits_supernet.py'))
    architecture = MODELS.build(cfg.architecture)
    mutator, rng = NasMutator(architecture), random.Random(seed)
    drawn: Dict[tuple, Dict] = {}
    while len(drawn) < count:
        subnet = mutator.sample(rng)
        flops = get_model_complexity(fix_subnet(architecture, subnet),
                                     torch.randn(1, 3, 16, 16)).flops
        if flops <= budget:
            drawn.setdefault(mutator.key(subnet), mutator.active(subnet))
    return list(drawn.values())


def train_and_test(subnet: Path, work_dir: Path, seed: int) -> Dict[str, float]:
    """Train the subnet from scratch with the subnet config; its test-split metrics."""
    cfg = Config.fromfile(str(CONFIGS / 'spos_shufflenet_digits_subnet.py'))
    cfg.model.fix_subnet = str(subnet)
    cfg.work_dir, cfg.randomness = str(work_dir), dict(seed=seed)
    cfg.experiment_name = work_dir.name
    runner = Runner.from_cfg(cfg)
    runner.train()
    return {key: float(value) for key, value in runner.test().items()}


def summary(values: Sequence[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f'{statistics.mean(values):.2f} ± {spread:.2f}'


def load_randoms(path: Path, seeds: List[int], budget: float) -> List[Dict]:
    """The random subnets' results of an earlier run's json; they must have been trained
    with ``seeds`` under ``budget`` to be comparable."""
    earlier = json.loads(path.read_text())
    if earlier['seeds'] != seeds or earlier['budget_flops'] != budget:
        raise SystemExit(f'{path}: seeds {earlier["seeds"]} and budget '
                         f'{earlier["budget_flops"]} differ from this run\'s {seeds} and '
                         f'{budget}')
    if not earlier['random']:
        raise SystemExit(f'{path} has no random subnets (a --random 0 run)')
    return earlier['random']


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--work-dir', default='work_dirs/nas_spos_benchmark')
    parser.add_argument('--random', type=int, default=10,
                        help='random subnets to train (ignored with --random-from)')
    parser.add_argument('--random-from', type=Path, metavar='JSON',
                        help="an earlier run's nas_spos.json: reuse its random subnets' "
                        'results (same --seeds and FLOPs budget) instead of training new ones')
    parser.add_argument('--overwrite', action='store_true',
                        help='replace an existing <work-dir>/nas_spos.json (without it the '
                        'run refuses to start)')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0],
                        help='training seeds of every subnet (each result is their mean)')
    parser.add_argument('--search-options', nargs='+', default=[], metavar='KEY=VALUE',
                        help="tools/search.py --cfg-options, e.g. a loss-ranked search: "
                        'search_cfg.score_key=accuracy/nll search_cfg.score_rule=less '
                        'val_evaluator.nll=True')
    args = parser.parse_args(argv)
    work = Path(args.work_dir)
    output = work / 'nas_spos.json'
    if output.exists() and not args.overwrite:
        parser.error(f'{output} exists: pass --overwrite to replace it, or another --work-dir')
    search_cfg = CONFIGS / 'spos_shufflenet_digits_search.py'
    budget = Config.fromfile(str(search_cfg)).search_cfg.constraints['flops']
    # read (and checked) before anything trains, and before this run may replace the file
    reused = None if args.random_from is None else load_randoms(args.random_from, args.seeds,
                                                                budget)
    start = time.perf_counter()
    assert tool('train').main([str(CONFIGS / 'spos_shufflenet_digits_supernet.py'),
                               '--work-dir', str(work / 'supernet')]) == 0
    assert tool('search').main([str(search_cfg), str(work / 'supernet' / 'epoch_20.pth'),
                                '--work-dir', str(work / 'search'), '--overwrite',
                                *(['--cfg-options', *args.search_options]
                                  if args.search_options else [])]) == 0
    searched_at = time.perf_counter()
    best = work / 'search' / 'best_subnet.yaml'
    top1 = 'accuracy/top1'
    searched = [train_and_test(best, work / 'searched' / f'seed{s}', s)[top1]
                for s in args.seeds]
    pipeline = time.perf_counter() - start
    retrain = time.perf_counter() - searched_at
    randoms = reused or []
    for index, subnet in enumerate([] if reused else
                                   random_subnets(args.random, budget, seed=2024)):
        path = work / 'random' / f'subnet{index}.yaml'
        FixedSubnet(subnet).dump(path)
        scores = [train_and_test(path, work / 'random' / f'subnet{index}_seed{s}', s)[top1]
                  for s in args.seeds]
        randoms.append(dict(subnet=subnet, test_top1=statistics.mean(scores), runs=scores))
    random_top1 = [r['test_top1'] for r in randoms] or [float('nan')]
    mean = statistics.mean(random_top1)
    std = statistics.stdev(random_top1) if len(random_top1) > 1 else 0.0
    result = dict(
        budget_flops=budget, seeds=args.seeds, search_options=args.search_options,
        searched_subnet=FixedSubnet.load(best).choices,
        searched_test_top1=statistics.mean(searched), searched_runs=searched,
        random=randoms, random_from=None if args.random_from is None else str(args.random_from),
        random_mean=mean, random_std=std,
        # None: no random subnets to judge against (--random 0 without --random-from)
        target_met=statistics.mean(searched) >= mean + std if randoms else None,
        pipeline_seconds=round(pipeline, 1), searched_retrain_seconds=round(retrain, 1),
        total_seconds=round(time.perf_counter() - start, 1), threads=torch.get_num_threads())
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1))
    print(f'FLOPs budget {budget:.3g}; test top-1 (seeds {args.seeds}):')
    print(f'| searched (SPOS + evolution) | {summary(searched)} |')
    source = f' (from {args.random_from})' if args.random_from else ''
    print(f'| {len(randoms)} random subnets{source} | {mean:.2f} ± {std:.2f} '
          f'(min {min(random_top1):.2f}, max {max(random_top1):.2f}) |')
    print(f'target (searched >= random mean + 1 std): {result["target_met"]}')
    print(f'SPOS pipeline {pipeline:.0f} s (retraining {retrain:.0f} s), '
          f'all {result["total_seconds"]:.0f} s')


if __name__ == '__main__':
    main()
