"""Search a trained AutoSlim supernet for subnets, and compare them with uniform widths.

    python tools/search.py configs/pruning/autoslim/autoslim_plaincnn_digits_search.py \
        work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth

The config's ``search_cfg`` names the loop (``GreedySearchLoop`` or
``EvolutionSearchLoop``) and its settings; the rest of the config (model, dataloaders,
evaluator) is the supernet's.  Written to the work dir:

- the channel config (YAML) of every chosen subnet, from the loop;
- ``search_results.json``: every evaluated subnet (FLOPs, params, score), the Pareto
  front, the uniform-width baseline (every ratio of the pruner, each with BatchNorm
  recalibration), and the chosen subnets and the baseline on the whole validation set;
- ``search_plot.png``: FLOPs vs score of all of it (and vs top-1 beside it when the
  score is another metric, e.g. the validation loss).

The log ends with a table of each chosen subnet next to the uniform width of nearest
FLOPs and the uniform curve interpolated at the subnet's FLOPs, all on the whole
validation set.  A config mistake is reported with its key and exit code 2.  See
docs/tools/search.md.
"""
import argparse
import inspect
import json
import logging
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from mmengine.config import Config, DictAction
from mmengine.logging import print_log
from mmengine.runner import Runner

from razorlib.engine.config import ConfigError, check_config, load_config, set_work_dir
from razorlib.engine.loops import BaseSearchLoop, SearchResult, SubnetRecord, nearest, pareto_front
from razorlib.utils import atomic_write_text
from razorlib.registry import LOOPS
from razorlib.utils.complexity import human

SEARCH_KEYS = ('model', 'val_dataloader', 'val_evaluator', 'search_cfg')
#: Arguments the Runner passes to a loop itself.
RUNNER_ARGS = ('runner', 'dataloader', 'evaluator')
TOP1 = 'accuracy/top1'


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Search subnets of a trained supernet.')
    parser.add_argument('config', help='search config: the supernet config plus search_cfg')
    parser.add_argument('checkpoint', help='the trained supernet checkpoint')
    parser.add_argument('--work-dir', help="default: the config's work_dir, else "
                        'work_dirs/<config name>')
    parser.add_argument('--resume', action='store_true',
                        help='continue an evolution search from work_dir/search_state.json')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys, e.g. search_cfg.max_epochs=5')
    return parser.parse_args(argv)


def search_loop_class(search_cfg: dict) -> type:
    """The loop ``search_cfg`` names, its arguments checked against its signature.

    Raises:
        ConfigError: naming ``search_cfg.type`` or the unknown argument.
    """
    loop_cls = LOOPS.get(search_cfg.get('type', ''))
    if not (inspect.isclass(loop_cls) and issubclass(loop_cls, BaseSearchLoop)):
        raise ConfigError(f"search_cfg.type: {search_cfg.get('type')!r} is not a search loop; "
                          'use GreedySearchLoop or EvolutionSearchLoop')
    accepted = [name for cls in (loop_cls, BaseSearchLoop)
                for name, param in inspect.signature(cls).parameters.items()
                if param.kind is not inspect.Parameter.VAR_KEYWORD]
    for key in search_cfg:
        if key != 'type' and key not in accepted:
            raise ConfigError(f'search_cfg.{key}: {loop_cls.__name__} takes no argument '
                              f"{key!r}; it takes {[a for a in accepted if a not in RUNNER_ARGS]}")
    return loop_cls


def prepare_config(args: argparse.Namespace) -> Config:
    """The runner config: ``search_cfg`` as its val loop, the checkpoint to load.

    Raises:
        ConfigError: naming the missing or wrong key.
    """
    cfg = load_config(args.config, args.cfg_options)
    check_config(cfg, SEARCH_KEYS)
    loop_cls = search_loop_class(cfg.search_cfg)
    if cfg.search_cfg.get('calib_dataloader') is None and cfg.get('train_dataloader') is None:
        raise ConfigError('train_dataloader: missing; BatchNorm recalibration needs it, or '
                          'search_cfg.calib_dataloader')
    if not Path(args.checkpoint).is_file():
        raise ConfigError(f'checkpoint: {args.checkpoint} does not exist')
    set_work_dir(cfg, args.config, args.work_dir)
    if args.resume:
        if 'resume_from' not in inspect.signature(loop_cls).parameters:
            raise ConfigError(f'--resume: {loop_cls.__name__} does not checkpoint its state')
        cfg.search_cfg.resume_from = str(Path(cfg.work_dir) / 'search_state.json')
    cfg.val_cfg = cfg.search_cfg
    cfg.load_from, cfg.resume = args.checkpoint, False
    return cfg


def uniform_baseline(loop: BaseSearchLoop, full: bool) -> List[SubnetRecord]:
    """Every space at each of the pruner's ratios, scored as the search scores."""
    return [loop.evaluate(loop.space.uniform(ratio), f'uniform x{ratio:.2f}', full)
            for ratio in sorted(loop.space.pruner.ratios)]


def on_full_val(loop: BaseSearchLoop, records: Dict[str, SubnetRecord]) -> Dict[str, SubnetRecord]:
    """``records`` scored on the whole validation set (the same if the search was)."""
    if loop.val_batches is None:
        return dict(records)
    return {name: loop.evaluate(r.widths, f'{name} (full val)', full=True)
            for name, r in records.items()}


def panels(loop: BaseSearchLoop, records: List[SubnetRecord]) -> List[Tuple[str, str]]:
    """The (metric, rule) pairs the plot draws: the search's score, and top-1 beside it
    when the search ranked by something else (a loss) and the evaluator reports top-1."""
    drawn = [(loop.score_key, loop.score_rule)]
    if loop.score_key != TOP1 and all(TOP1 in r.metrics for r in records):
        drawn.append((TOP1, 'greater'))
    return drawn


def plot(path: Path, records: List[SubnetRecord], uniform: List[SubnetRecord],
         chosen: Dict[str, SubnetRecord], metrics: List[Tuple[str, str]], title: str) -> None:
    """FLOPs vs each of ``metrics`` (one panel per ``(key, rule)``, better upwards):
    every evaluated subnet, their Pareto front, uniform widths and the chosen subnets."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, axes = plt.subplots(1, len(metrics), figsize=(7 * len(metrics), 5), dpi=120,
                             squeeze=False)
    for ax, (key, rule) in zip(axes[0], metrics):
        sign = 1.0 if rule == 'greater' else -1.0
        # The axis ends a little beyond the uniform curve and the chosen subnets, so that
        # a few very poor candidates do not squash the part that matters.
        worst = min(sign * r.value(key) for r in uniform + list(chosen.values()))
        best = max(sign * r.value(key) for r in uniform + records)
        pad = 0.1 * (best - worst) or 0.5
        hidden = sum(sign * r.value(key) < worst - pad for r in records)
        ax.scatter([r.flops for r in records], [r.value(key) for r in records], s=10, c='0.6',
                   label=f'evaluated subnets ({len(records)}'
                   + (f', {hidden} off the axis)' if hidden else ')'))
        ax.set_ylim(sign * (worst - pad), sign * (best + pad))
        front = pareto_front(records, rule, key)
        ax.step([r.flops for r in front], [r.value(key) for r in front], where='post',
                c='tab:red', label='Pareto front')
        ax.plot([r.flops for r in uniform], [r.value(key) for r in uniform], 'o--', c='tab:blue',
                label='uniform width (BN recalibrated)')
        ax.plot([r.flops for r in chosen.values()], [r.value(key) for r in chosen.values()], '*',
                c='tab:green', ms=14, label='chosen')
        for name, record in chosen.items():
            ax.annotate(name, (record.flops, record.value(key)), textcoords='offset points',
                        xytext=(6, -12), fontsize=8)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human(v)))
        ax.set(xlabel='FLOPs', ylabel=key + ('' if rule == 'greater' else ' (lower is better)'))
        ax.grid(alpha=0.3)
        ax.legend(loc='lower right')
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def uniform_at(uniform: List[SubnetRecord], flops: float, key: Optional[str] = None) -> float:
    """The uniform-width score (or metric ``key``) at ``flops``, linear between the
    nearest two widths."""
    ordered = sorted(uniform, key=lambda r: r.flops)
    return float(np.interp(flops, [r.flops for r in ordered], [r.value(key) for r in ordered]))


def comparison_table(chosen: Dict[str, SubnetRecord], uniform: List[SubnetRecord],
                     key: str) -> List[str]:
    """Each chosen subnet's metric ``key``, that of the uniform width of nearest FLOPs,
    and the uniform curve at the subnet's own FLOPs (``delta`` is against that)."""
    lines = [f"{'subnet':24}{'FLOPs':>9}{'params':>9}{key:>15}  | {'nearest uniform':>15}"
             f"{'FLOPs':>9}{key:>15}  | {'uniform@FLOPs':>14}{'delta':>9}"]
    for name, record in chosen.items():
        base, level = nearest(uniform, record.flops), uniform_at(uniform, record.flops, key)
        value = record.value(key)
        lines.append(f'{name:24}{human(record.flops):>9}{human(record.params):>9}'
                     f'{value:>15.4f}  | {base.tag:>15}{human(base.flops):>9}'
                     f'{base.value(key):>15.4f}  | {level:>14.4f}{value - level:>+9.4f}')
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        cfg = prepare_config(args)
        runner = Runner.from_cfg(cfg)
        loop: BaseSearchLoop = runner.val_loop  # built here: its settings are checked
        result: SearchResult = runner.val()
    except ConfigError as err:
        print_log(f'{args.config}: {err}', logger='current', level=logging.ERROR)
        return 2
    logger, work_dir = runner.logger, Path(cfg.work_dir)

    uniform = uniform_baseline(loop, full=False)
    uniform_full = uniform if loop.val_batches is None else uniform_baseline(loop, full=True)
    chosen_full = on_full_val(loop, result.chosen)
    split = ('whole validation set' if loop.val_batches is None
             else f'first {loop.val_batches} validation batches')
    results = dict(
        search=cfg.search_cfg.type, score_key=loop.score_key, score_rule=loop.score_rule,
        scored_on=split, records=[r.to_dict() for r in result.records],
        pareto_front=[r.to_dict() for r in pareto_front(result.records, loop.score_rule)],
        history=[r.to_dict() for r in result.history],
        uniform=[r.to_dict() for r in uniform],
        chosen={name: dict(file=str(result.files[name]), search=r.to_dict(),
                           full_val=chosen_full[name].to_dict())
                for name, r in result.chosen.items()},
        uniform_full_val=[r.to_dict() for r in uniform_full])
    atomic_write_text(work_dir / 'search_results.json', json.dumps(results, indent=1))
    plot(work_dir / 'search_plot.png', result.records, uniform, result.chosen,
         panels(loop, result.records), f'{cfg.search_cfg.type}, scored on the {split}')
    logger.info('chosen subnets vs uniform widths (whole validation set):')
    for key, _ in panels(loop, result.records):
        for line in comparison_table(chosen_full, uniform_full, key):
            logger.info(line)
    logger.info(f'wrote {", ".join(str(p) for p in result.files.values())}, '
                f'{work_dir / "search_results.json"} and {work_dir / "search_plot.png"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
