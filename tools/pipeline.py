"""The whole AutoSlim pipeline on the offline digits, end to end, in one command.

Example:
    python tools/pipeline.py [--work-dir work_dirs/pipeline] [--threads 1] [--seeds 3]

1. Train the AutoSlim supernet (``tools/train.py``, sandwich rule, 30 epochs).
2. Greedy search down to three FLOPs targets (``tools/search.py``); the chosen subnets
   and their targets are read from its ``search_results.json``.
3. For each searched subnet, and for the uniform-width subnet of the same FLOPs: slice it
   out of the supernet (``tools/prune.py``), fine-tune it (``tools/train.py``) once per
   seed, measure top-1 (the mean over the seeds: one run's top-1 moves by an image or two
   of 360, as much as the subnets differ) and latency on this CPU, and quantize the first
   seed's model to INT8 (``tools/ptq.py``, onnxruntime top-1 of the QDQ model).
4. Print the table, searched subnets beside their uniform-width baselines, and write
   ``pipeline.json``.

Each step is the tool a user would run, started as a subprocess; its log is in
``<work-dir>/logs/``.  See docs/getting_started.md.

From a fixed subnet instead (a NAS subnet config, or any classifier config)::

    python tools/pipeline.py --from-subnet configs/nas/spos/spos_shufflenet_digits_subnet.py \\
        --cfg-options model.fix_subnet=work_dirs/spos_shufflenet_digits_search/best_subnet.yaml \\
        [--train-epochs 20] [--prune-flops 0.5 0.25] [--finetune-epochs 10] [--seeds 3]

trains the config's model from scratch, quantizes it, prunes it to each FLOPs fraction
(L1 norms), fine-tunes and quantizes each pruned model, and prints the same table
without the uniform column.  See docs/tools/pipeline.md.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import runpy
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from mmengine.config import DictAction

# Nothing heavy is imported here (no torch), so that --help is instant; the functions
# import what they use.
if TYPE_CHECKING:
    import torch.nn as nn
    from mmengine.config import Config
    from mmengine.logging import MMLogger

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs' / 'pruning' / 'autoslim'
SUPERNET = CONFIGS / 'autoslim_plaincnn_digits_supernet.py'
SEARCH = CONFIGS / 'autoslim_plaincnn_digits_search.py'
FINETUNE = CONFIGS / 'autoslim_plaincnn_digits_subnet_finetune.py'
#: razorlib.utils.cli, run from its file beside this folder: ``import razorlib`` loads
#: torch, which --help must not wait for.
CLI = runpy.run_path(str(Path(__file__).resolve().parents[1] / 'razorlib' / 'utils' / 'cli.py'))
at_least, in_range = CLI['at_least'], CLI['in_range']
#: The defaults of the flags of one pipeline only (None: the config's), set when that
#: pipeline runs; given to the other one, such a flag is refused (it would be ignored).
AUTOSLIM_ONLY = {'supernet_epochs': 30}
SUBNET_ONLY = {'cfg_options': None, 'train_epochs': None, 'prune_flops': [0.5]}
#: The time, logger, level (and for an error, file, function and line) before a log
#: message: ``11/29 17:41:21 - mmengine - ERROR - /path/x.py - main - 12 - ``.
LOG_PREFIX = re.compile(r'^[\d/]+ [\d:]+ - \S+ - [A-Z]+ - (?:\S+ - \w+ - \d+ - )?')


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--work-dir', default='work_dirs/pipeline',
                        help='where every step writes (default: %(default)s)')
    parser.add_argument('--threads', type=at_least(1), default=1,
                        help='torch threads of every step (one is fastest for these tiny '
                        'models) (default: %(default)s)')
    parser.add_argument('--supernet-epochs', type=at_least(1),
                        help='epochs of supernet training (default: '
                        f"{AUTOSLIM_ONLY['supernet_epochs']}; not with --from-subnet)")
    parser.add_argument('--finetune-epochs', type=at_least(1), default=10,
                        help='epochs of each subnet fine-tune (default: %(default)s)')
    parser.add_argument('--seeds', type=at_least(1), default=3,
                        help='fine-tune runs per subnet (seeds 0..N-1); top-1 is their mean '
                        '(default: %(default)s)')
    subnet = parser.add_argument_group('starting from a fixed subnet (instead of AutoSlim)')
    subnet.add_argument('--from-subnet', metavar='CONFIG',
                        help='train, quantize, prune and fine-tune the model of this config '
                        '(a NAS subnet config: model.fix_subnet names its YAML) (default: none, '
                        'the AutoSlim pipeline)')
    subnet.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override keys of --from-subnet CONFIG, e.g. model.fix_subnet=PATH '
                        '(default: none)')
    subnet.add_argument('--train-epochs', type=at_least(1),
                        help="epochs of training CONFIG's model (default: the config's)")
    subnet.add_argument('--prune-flops', type=in_range(0, 1, '()'), nargs='+', metavar='F',
                        help="prune the trained model to each fraction F of its FLOPs "
                        f"(default: {SUBNET_ONLY['prune_flops']})")
    args = parser.parse_args(argv)
    if args.from_subnet:
        own, other = SUBNET_ONLY, AUTOSLIM_ONLY
        needs = 'the AutoSlim pipeline only (without --from-subnet)'
    else:
        own, other, needs = AUTOSLIM_ONLY, SUBNET_ONLY, '--from-subnet CONFIG only'
    for dest in other:
        if getattr(args, dest) is not None:
            parser.error(f"--{dest.replace('_', '-')}: for {needs}")
    for dest, default in own.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    return args


class StepFailed(Exception):
    """A step's tool exited with an error: the pipeline stops and exits with its code
    (a refusal's 2 stays 2), in one line naming the step, the reason and the step's log."""

    def __init__(self, step: str, name: str, code: int, log: Path):
        lines = [line for line in log.read_text(errors='replace').splitlines() if line.strip()]
        last = LOG_PREFIX.sub('', lines[-1].strip()) if lines else 'its log is empty'
        if code < 0:  # killed: its log's last line is whatever it was doing, not why
            how = f'was killed by {_signal_name(-code)}'
            last = f'its log ends: {last}' if lines else last
        else:
            how = f'failed with code {code}'
        super().__init__(f'step {step!r} (tools/{name}.py) {how}: {last}; its log: {log}')
        self.code = code if code > 0 else 128 - code  # killed by a signal: 128 + its number


def _signal_name(number: int) -> str:
    """``SIGKILL`` for 9 (an out-of-memory kill), ``signal 99`` for a number unknown."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f'signal {number}'


class Pipeline:
    """Runs the tools one after another in ``work_dir`` and keeps their results."""

    def __init__(self, work_dir: Path, threads: int, logger: MMLogger):
        self.work_dir, self.threads, self.logger = work_dir, threads, logger
        self.env = dict(os.environ, OMP_NUM_THREADS=str(threads))

    def tool(self, step: str, name: str, *args: str) -> None:
        """Run ``tools/<name>.py args``.

        Raises:
            StepFailed: the tool's exit code, with the last line of its log.
        """
        log = self.work_dir / 'logs' / f'{step}.log'
        log.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with open(log, 'w') as out:
            code = subprocess.call([sys.executable, str(ROOT / 'tools' / f'{name}.py'), *args],
                                   stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                   cwd=ROOT)
        if code != 0:
            raise StepFailed(step, name, code, log)
        self.logger.info(f'{step}: done in {time.perf_counter() - start:.0f} s ({log})')


def top1(model: nn.Module, cfg) -> float:
    """Top-1 of an ImageClassifier on the config's validation set."""
    import torch
    from mmengine.runner import Runner

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
    import torch

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
    import torch

    from razorlib.utils import get_model_complexity

    ptq = json.loads(ptq_json.read_text())['top1']
    size = get_model_complexity(models[0], torch.randn(1, *shape))
    runs = [top1(model, cfg) for model in models]
    return dict(subnet=name, flops=size.flops, params=size.params, top1=statistics.mean(runs),
                top1_runs=runs, int8_top1=ptq['int8_onnxruntime'],
                latency_ms=latency_ms(models[0], shape))


def searched_subnets(results_json: Path) -> List[Tuple[float, Path]]:
    """``(FLOPs target, channel config file)`` of each subnet the search chose, largest
    target first, from its results JSON (``DumpSubnetHook``)."""
    results = json.loads(results_json.read_text())
    chosen = sorted(((entry['limits']['flops'], results_json.parent / entry['file'])
                     for entry in results['chosen'].values()), reverse=True)
    if not chosen:
        raise RuntimeError(f'{results_json}: the search chose no subnet')
    return chosen


HEAD = f"{'FLOPs':>9}{'params':>9}{'top-1':>8}{'INT8':>8}{'lat ms':>9}"


def cells(row: Optional[Dict]) -> str:
    """One row's figures under :data:`HEAD` (blank for None)."""
    from razorlib.utils.complexity import human

    if row is None:
        return f"{'':>9}{'':>9}{'':>8}{'':>8}{'':>9}"
    return (f"{human(row['flops']):>9}{human(row['params']):>9}{row['top1']:>8.2f}"
            f"{row['int8_top1']:>8.2f}{row['latency_ms']:>9.3f}")


def table(rows: List[Dict], pairs: List[tuple]) -> List[str]:
    head = HEAD
    lines = [f"{'subnet':<14}{head} | {'uniform, same FLOPs':<20}{head}{'gain':>7}"]
    by_name = {row['subnet']: row for row in rows}
    for searched, uniform in pairs:
        a, b = by_name[searched], by_name.get(uniform)
        gain = f"{a['top1'] - b['top1']:>+7.2f}" if b else ''
        lines.append(f"{searched:<14}{cells(a)} | {(uniform or ''):<20}{cells(b)}{gain}")
    return lines


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope

    from razorlib.engine.config import ConfigError
    from razorlib.registry import SCOPE
    from razorlib.utils.cli import refuse

    init_default_scope(SCOPE)
    try:  # before the work dir and its log are made
        subnet_cfg = subnet_config(args) if args.from_subnet else None
    except ConfigError as err:
        return refuse(f'--from-subnet {err}')
    torch.set_num_threads(args.threads)
    work_dir = Path(args.work_dir).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    logger = MMLogger.get_instance(f'razorlib_pipeline:{work_dir}',
                                   log_file=str(work_dir / 'pipeline.log'))
    run = Pipeline(work_dir, args.threads, logger)
    try:
        return autoslim(args, run) if subnet_cfg is None else from_subnet(args, subnet_cfg, run)
    except StepFailed as err:
        logger.error(str(err))
        return err.code


def autoslim(args: argparse.Namespace, run: Pipeline) -> int:
    """The AutoSlim pipeline: train the supernet, search it, then per searched subnet and
    its uniform-width twin prune, fine-tune per seed and INT8; the table."""
    from mmengine.runner import load_checkpoint

    from razorlib.engine.config import load_config
    from razorlib.pruning import remove_masks
    from razorlib.registry import MODELS
    from razorlib.utils.complexity import human

    work_dir, logger = run.work_dir, run.logger
    start = time.perf_counter()
    supernet_dir = work_dir / 'supernet'
    epochs = args.supernet_epochs
    run.tool('1_train_supernet', 'train', str(SUPERNET), '--work-dir', str(supernet_dir),
             '--cfg-options', f'train_cfg.max_epochs={epochs}',
             f'param_scheduler.1.T_max={epochs}', f'param_scheduler.1.end={epochs}')
    checkpoint = supernet_dir / f'epoch_{epochs}.pth'
    search_dir = work_dir / 'search'
    # the pipeline owns its work dir: a second run replaces the first one's results
    run.tool('2_search', 'search', str(SEARCH), str(checkpoint), '--work-dir', str(search_dir),
             '--overwrite')

    cfg = load_config(SUPERNET)
    supernet = MODELS.build(cfg.model)
    load_checkpoint(supernet, str(checkpoint), map_location='cpu', logger='silent')
    shape = supernet.input_shape
    subnets: Dict[str, Path] = {}
    pairs = []
    for target, path in searched_subnets(search_dir / 'search_results.json'):
        searched = f'searched {human(target)}'
        supernet.set_subnet(path)
        flops = supernet.flops_params().flops
        supernet.set_subnet(supernet.uniform_subnet(flops))
        uniform_path = search_dir / f'uniform_{path.stem}.yaml'
        supernet.export_subnet().dump(uniform_path)
        uniform = f'uniform {human(supernet.flops_params().flops)}'
        subnets.update({searched: path, uniform: uniform_path})
        pairs.append((searched, uniform))

    rows = []
    run.tool('3_ptq_supernet', 'ptq', str(SUPERNET), str(checkpoint),
             '--work-dir', str(work_dir / 'ptq_supernet'), '--overwrite')
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
                 str(path), '--work-dir', str(folder / 'prune'), '--overwrite')
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
                 '--work-dir', str(folder / 'ptq'), '--overwrite', '--cfg-options', *options)
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


# ---------------------------------------------------------------- from a fixed subnet
def set_epochs(cfg: Config, epochs: int) -> None:
    """Train ``cfg`` for ``epochs``: validate and save at the end, and stretch each
    epoch-based scheduler that ended with the old schedule to end with the new one."""
    old = cfg.train_cfg.max_epochs
    cfg.merge_from_dict({'train_cfg.max_epochs': epochs, 'train_cfg.val_interval': epochs,
                         'default_hooks.checkpoint.interval': epochs})
    schedulers = cfg.get('param_scheduler') or []
    for scheduler in schedulers if isinstance(schedulers, list) else [schedulers]:
        for key in ('T_max', 'end'):
            if scheduler.get('by_epoch', True) and scheduler.get(key) == old:
                scheduler[key] = epochs


def subnet_config(args: argparse.Namespace) -> Config:
    """``--from-subnet CONFIG`` with ``--cfg-options`` and ``--train-epochs``, its subnet
    file made absolute and checked (before the work dir is made).

    Raises:
        ConfigError: a missing config or subnet file, a ``--cfg-options`` key it lacks.
    """
    from razorlib.engine.config import ConfigError, load_config
    from razorlib.utils.cli import merge_cfg_options

    cfg = merge_cfg_options(load_config(args.from_subnet), args.cfg_options, error=ConfigError)
    fix = cfg.model.get('fix_subnet')
    if isinstance(fix, str):
        if not Path(fix).is_file():
            raise ConfigError(f'{args.from_subnet}: model.fix_subnet {fix} does not exist; '
                              'pass --cfg-options model.fix_subnet=PATH (a search\'s '
                              'best_subnet.yaml)')
        cfg.model.fix_subnet = str(Path(fix).resolve())
    if args.train_epochs:
        set_epochs(cfg, args.train_epochs)
    return cfg


def finetune_config(cfg: Config, prune_dir: Path, epochs: int, path: Path) -> Path:
    """The fine-tune config of a pruned model, written to ``path``: ``sub_model`` of the
    config's model sliced to ``channel_cfg.yaml``, starting from ``slim.pth``, at a fifth
    of the training learning rate, cosine to zero over ``epochs``."""
    tuned = copy.deepcopy(cfg)
    tuned.model = dict(type='sub_model', architecture=cfg.model,
                       channel_cfg=str(prune_dir / 'channel_cfg.yaml'))
    tuned.load_from = str(prune_dir / 'slim.pth')
    tuned.optim_wrapper.optimizer.lr = cfg.optim_wrapper.optimizer.lr / 5
    tuned.param_scheduler = [dict(type='CosineAnnealingLR', T_max=epochs, by_epoch=True,
                                  begin=0, end=epochs)]
    set_epochs(tuned, epochs)
    tuned.dump(str(path))
    return path


def prune_to_flops(model: nn.Module, shape, fraction: float, folder: Path) -> None:
    """Prune ``model`` to ``fraction`` of its FLOPs (L1 norms, one ratio per group) and
    write ``channel_cfg.yaml`` and ``slim.pth`` into ``folder``, as tools/prune.py does."""
    import torch

    from razorlib.pruning import slim_model
    from razorlib.registry import PRUNERS

    masked = copy.deepcopy(model).eval()
    pruner = PRUNERS.build(dict(type='ImportancePruner', flops=fraction))
    pruner.prepare_from_supernet(masked, torch.randn(1, *shape))
    pruner.set_subnet(pruner.allocate().subnet)
    channel_cfg = pruner.export_subnet()
    folder.mkdir(parents=True, exist_ok=True)
    channel_cfg.dump(folder / 'channel_cfg.yaml')
    torch.save(slim_model(masked, channel_cfg).state_dict(), folder / 'slim.pth')


def input_shape(model: nn.Module, cfg: Config) -> Tuple[int, ...]:
    """``(C, H, W)`` of one preprocessed validation image."""
    from mmengine.runner import Runner

    batch = next(iter(Runner.build_dataloader(cfg.val_dataloader)))
    return tuple(model.data_preprocessor(batch, False)['inputs'].shape[1:])


def trained(cfg: Config, checkpoint: Path) -> nn.Module:
    """The config's model with the checkpoint's weights."""
    from mmengine.runner import load_checkpoint

    from razorlib.registry import MODELS

    model = MODELS.build(cfg.model)
    load_checkpoint(model, str(checkpoint), map_location='cpu', logger='silent')
    return model.eval()


def from_subnet(args: argparse.Namespace, subnet_cfg: Config, run: Pipeline) -> int:
    """The pipeline from a fixed subnet: write ``subnet_cfg`` as
    ``<work-dir>/subnet_config.py`` (what every step reads), train its model from
    scratch, INT8, then per ``--prune-flops`` fraction prune, fine-tune per seed and
    INT8; the table."""
    from razorlib.engine.config import load_config

    work_dir, logger = run.work_dir, run.logger
    start = time.perf_counter()
    config = work_dir / 'subnet_config.py'
    subnet_cfg.dump(str(config))
    cfg = load_config(config)
    epochs = cfg.train_cfg.max_epochs
    run.tool('1_train_subnet', 'train', str(config), '--work-dir', str(work_dir / 'subnet'))
    checkpoint = work_dir / 'subnet' / f'epoch_{epochs}.pth'
    run.tool('2_ptq_subnet', 'ptq', str(config), str(checkpoint),
             '--work-dir', str(work_dir / 'ptq_subnet'), '--overwrite')
    model = trained(cfg, checkpoint)
    shape = input_shape(model, cfg)
    rows = [measure('subnet', [model], cfg, shape, work_dir / 'ptq_subnet' / 'ptq.json')]
    finetune_epochs = args.finetune_epochs
    for index, fraction in enumerate(args.prune_flops):
        folder = work_dir / f'pruned{index}'
        prune_to_flops(model, shape, fraction, folder / 'prune')
        logger.info(f'3_{index}_prune: {fraction:g} of the FLOPs, {folder / "prune"}')
        tune = finetune_config(cfg, folder / 'prune', finetune_epochs,
                               folder / 'finetune_config.py')
        models = []
        for seed in range(args.seeds):
            tuned_dir = folder / f'finetune_seed{seed}'
            run.tool(f'3_{index}_finetune_seed{seed}', 'train', str(tune), '--work-dir',
                     str(tuned_dir), '--cfg-options', f'randomness.seed={seed}')
            models.append(trained(load_config(tune), tuned_dir / f'epoch_{finetune_epochs}.pth'))
        run.tool(f'3_{index}_ptq', 'ptq', str(tune),
                 str(folder / 'finetune_seed0' / f'epoch_{finetune_epochs}.pth'),
                 '--work-dir', str(folder / 'ptq'), '--overwrite')
        rows.append(measure(f'pruned {fraction:g} FLOPs', models, cfg, shape,
                            folder / 'ptq' / 'ptq.json'))
    logger.info(f'pipeline from {args.from_subnet} done in {time.perf_counter() - start:.0f} s;'
                f' top-1 on the validation split (pruned models: mean of {args.seeds} '
                'fine-tune seeds), INT8 = onnxruntime running the QDQ model (seed 0), batch-1 '
                f'latency on this CPU with {args.threads} thread(s):')
    for line in [f"{'model':<22}{HEAD}"] + [f"{row['subnet']:<22}{cells(row)}" for row in rows]:
        logger.info(line)
    logger.info('top-1 of each fine-tune seed: ' + '; '.join(
        f"{row['subnet']}: {' '.join(f'{t:.2f}' for t in row['top1_runs'])}"
        for row in rows[1:]))
    (work_dir / 'pipeline.json').write_text(json.dumps(dict(rows=rows, pairs=[]), indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
