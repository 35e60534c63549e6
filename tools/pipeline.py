"""The whole AutoSlim pipeline on the offline digits, end to end, in one command.

    python tools/pipeline.py [--work-dir work_dirs/pipeline] [--threads 1] [--seeds 3]

1. Train the AutoSlim supernet (``tools/train.py``, sandwich rule, 30 epochs).
2. Greedy search down to three FLOPs targets (``tools/search.py``).
3. For each searched subnet, and for the uniform-width subnet of the same FLOPs: slice it
   out of the supernet (``tools/prune.py``), fine-tune it (``tools/train.py``) once per
   seed, measure top-1 (the mean over the seeds: one run's top-1 moves by an image or two
   of 360, as much as the subnets differ) and latency on this CPU, and quantize the first
   seed's model to INT8 (``tools/ptq.py``, onnxruntime top-1 of the QDQ model).
4. Print the table, searched subnets beside their uniform-width baselines, and write
   ``pipeline.json``.

Each step is the tool a user would run, started as a subprocess; its log is in
``<work-dir>/logs/``.  See docs/getting_started.md.
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from mmengine.logging import MMLogger
from mmengine.registry import init_default_scope
from mmengine.runner import Runner, load_checkpoint

from razorlib.engine.config import load_config
from razorlib.pruning import remove_masks
from razorlib.registry import MODELS, SCOPE
from razorlib.utils import get_model_complexity
from razorlib.utils.complexity import human

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs' / 'pruning' / 'autoslim'
SUPERNET = CONFIGS / 'autoslim_plaincnn_digits_supernet.py'
SEARCH = CONFIGS / 'autoslim_plaincnn_digits_search.py'
FINETUNE = CONFIGS / 'autoslim_plaincnn_digits_subnet_finetune.py'


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--work-dir', default='work_dirs/pipeline')
    parser.add_argument('--threads', type=int, default=1,
                        help='torch threads (one is fastest for these tiny models)')
    parser.add_argument('--supernet-epochs', type=int, default=30)
    parser.add_argument('--finetune-epochs', type=int, default=10)
    parser.add_argument('--seeds', type=int, default=3,
                        help='fine-tune runs per subnet (seeds 0..N-1); top-1 is their mean')
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f'--seeds must be at least 1, got {args.seeds}')
    return args


class Pipeline:
    """Runs the tools one after another in ``work_dir`` and keeps their results."""

    def __init__(self, work_dir: Path, threads: int, logger: MMLogger):
        self.work_dir, self.threads, self.logger = work_dir, threads, logger
        self.env = dict(os.environ, OMP_NUM_THREADS=str(threads))

    def tool(self, step: str, name: str, *args: str) -> None:
        """Run ``tools/<name>.py args``; on failure show the end of its log."""
        log = self.work_dir / 'logs' / f'{step}.log'
        log.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with open(log, 'w') as out:
            code = subprocess.call([sys.executable, str(ROOT / 'tools' / f'{name}.py'), *args],
                                   stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                   cwd=ROOT)
        if code != 0:
            tail = ''.join(log.read_text().splitlines(keepends=True)[-25:])
            raise RuntimeError(f'step {step!r} (tools/{name}.py) failed with code {code}; '
                               f'end of {log}:\n{tail}')
        self.logger.info(f'{step}: done in {time.perf_counter() - start:.0f} s ({log})')


def top1(model: nn.Module, cfg) -> float:
    """Top-1 of an ImageClassifier on the config's validation set."""
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for batch in Runner.build_dataloader(cfg.val_dataloader):
            data = model.data_preprocessor(batch, False)
            labels = torch.cat([s.gt_label for s in data['data_samples']])
            correct += int((model(data['inputs']).argmax(1) == labels).sum())
            total += len(labels)
    return 100.0 * correct / total


def latency_ms(model: nn.Module, shape, runs: int = 300) -> float:
    """Median batch-1 latency of ``model`` on this CPU, in milliseconds."""
    x = torch.randn(1, *shape)
    model.eval()
    times = []
    with torch.no_grad():
        for i in range(runs + 30):
            start = time.perf_counter()
            model(x)
            if i >= 30:
                times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def measure(name: str, models: List[nn.Module], cfg, shape, ptq_json: Path) -> Dict:
    """FLOPs, params, INT8 top-1 and latency of ``models[0]``; top-1 the mean over all
    (the same subnet fine-tuned with different seeds), each run's in ``top1_runs``."""
    ptq = json.loads(ptq_json.read_text())['top1']
    size = get_model_complexity(models[0], torch.randn(1, *shape))
    runs = [top1(model, cfg) for model in models]
    return dict(subnet=name, flops=size.flops, params=size.params, top1=statistics.mean(runs),
                top1_runs=runs, int8_top1=ptq['int8_onnxruntime'],
                latency_ms=latency_ms(models[0], shape))


def table(rows: List[Dict], pairs: List[tuple]) -> List[str]:
    def cells(row: Optional[Dict]) -> str:
        if row is None:
            return f"{'':>9}{'':>9}{'':>8}{'':>8}{'':>9}"
        return (f"{human(row['flops']):>9}{human(row['params']):>9}{row['top1']:>8.2f}"
                f"{row['int8_top1']:>8.2f}{row['latency_ms']:>9.3f}")
    head = f"{'FLOPs':>9}{'params':>9}{'top-1':>8}{'INT8':>8}{'lat ms':>9}"
    lines = [f"{'subnet':<14}{head} | {'uniform, same FLOPs':<20}{head}{'gain':>7}"]
    by_name = {row['subnet']: row for row in rows}
    for searched, uniform in pairs:
        a, b = by_name[searched], by_name.get(uniform)
        gain = f"{a['top1'] - b['top1']:>+7.2f}" if b else ''
        lines.append(f"{searched:<14}{cells(a)} | {(uniform or ''):<20}{cells(b)}{gain}")
    return lines


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    work_dir = Path(args.work_dir).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    logger = MMLogger.get_instance('razorlib_pipeline', log_file=str(work_dir / 'pipeline.log'))
    init_default_scope(SCOPE)
    run = Pipeline(work_dir, args.threads, logger)
    start = time.perf_counter()

    supernet_dir = work_dir / 'supernet'
    epochs = args.supernet_epochs
    run.tool('1_train_supernet', 'train', str(SUPERNET), '--work-dir', str(supernet_dir),
             '--cfg-options', f'train_cfg.max_epochs={epochs}',
             f'param_scheduler.1.T_max={epochs}', f'param_scheduler.1.end={epochs}')
    checkpoint = supernet_dir / f'epoch_{epochs}.pth'
    search_dir = work_dir / 'search'
    run.tool('2_search', 'search', str(SEARCH), str(checkpoint), '--work-dir', str(search_dir))

    cfg = load_config(SUPERNET)
    supernet = MODELS.build(cfg.model)
    load_checkpoint(supernet, str(checkpoint), map_location='cpu', logger='silent')
    shape = supernet.input_shape
    subnets: Dict[str, Path] = {}
    pairs = []
    targets = {float(p.stem[len('subnet_flops'):]): p
               for p in search_dir.glob('subnet_flops*.yaml')}
    for target, path in sorted(targets.items(), reverse=True):
        searched = f'searched {human(target)}'
        supernet.set_subnet(path)
        flops = supernet.flops_params().flops
        supernet.set_subnet(supernet.uniform_subnet(flops))
        uniform_path = search_dir / f'uniform_{path.stem}.yaml'
        supernet.export_subnet().dump(uniform_path)
        uniform = f'uniform {human(supernet.flops_params().flops)}'
        subnets.update({searched: path, uniform: uniform_path})
        pairs.append((searched, uniform))
    if not pairs:
        raise RuntimeError(f'the search wrote no subnet_flops*.yaml into {search_dir}')

    rows = []
    run.tool('3_ptq_supernet', 'ptq', str(SUPERNET), str(checkpoint),
             '--work-dir', str(work_dir / 'ptq_supernet'))
    supernet.set_max_subnet()
    full = copy.deepcopy(supernet.architecture)
    remove_masks(full)
    rows.append(measure('supernet max', [full], cfg, shape,
                        work_dir / 'ptq_supernet' / 'ptq.json'))
    finetune_cfg = load_config(FINETUNE)
    finetune_epochs = args.finetune_epochs
    for index, (name, path) in enumerate(subnets.items()):
        folder = work_dir / f'subnet{index}'
        run.tool(f'4_{index}_prune', 'prune', str(SUPERNET), str(checkpoint), '--subnet',
                 str(path), '--work-dir', str(folder / 'prune'))
        options = [f'model.channel_cfg={folder / "prune" / "channel_cfg.yaml"}']
        models = []
        for seed in range(args.seeds):
            tuned_dir = folder / f'finetune_seed{seed}'
            run.tool(f'4_{index}_finetune_seed{seed}', 'train', str(FINETUNE), '--work-dir',
                     str(tuned_dir), '--cfg-options', *options,
                     f'load_from={folder / "prune" / "slim.pth"}', f'randomness.seed={seed}',
                     f'train_cfg.max_epochs={finetune_epochs}',
                     f'param_scheduler.0.T_max={finetune_epochs}',
                     f'param_scheduler.0.end={finetune_epochs}',
                     f'train_cfg.val_interval={finetune_epochs}',
                     f'default_hooks.checkpoint.interval={finetune_epochs}')
            model = MODELS.build(dict(finetune_cfg.model,
                                      channel_cfg=options[0].split('=', 1)[1]))
            load_checkpoint(model, str(tuned_dir / f'epoch_{finetune_epochs}.pth'),
                            map_location='cpu', logger='silent')
            models.append(model)
        run.tool(f'4_{index}_ptq', 'ptq', str(FINETUNE),
                 str(folder / 'finetune_seed0' / f'epoch_{finetune_epochs}.pth'),
                 '--work-dir', str(folder / 'ptq'), '--cfg-options', *options)
        rows.append(measure(name, models, finetune_cfg, shape, folder / 'ptq' / 'ptq.json'))

    lines = table(rows, [('supernet max', None)] + pairs)
    logger.info(f'pipeline done in {time.perf_counter() - start:.0f} s; top-1 on the 360 '
                f'validation digits (fine-tuned subnets: mean of {args.seeds} seeds), INT8 = '
                'onnxruntime running the QDQ model of seed 0, batch-1 latency on this CPU '
                f'with {args.threads} thread(s):')
    for line in lines:
        logger.info(line)
    logger.info('top-1 of each fine-tune seed: ' + '; '.join(
        f"{row['subnet']}: {' '.join(f'{t:.2f}' for t in row['top1_runs'])}"
        for row in rows[1:]))
    (work_dir / 'pipeline.json').write_text(json.dumps(dict(rows=rows, pairs=pairs), indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
