"""Search a trained AutoSlim supernet for subnets, and compare them with uniform widths.

Example:
    python tools/search.py configs/pruning/autoslim/autoslim_plaincnn_digits_search.py \\
        work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth

The config's ``search_cfg`` names the loop (``GreedySearchLoop`` or
``EvolutionSearchLoop``) and its settings; the rest of the config (model, dataloaders,
evaluator) is the supernet's.  Written to the work dir, by ``DumpSubnetHook`` (added to
``custom_hooks`` when the config has none):

- the channel config (YAML) of every chosen subnet;
- ``search_results.json``: each chosen subnet (file, limits, FLOPs, params, score,
  metrics), every evaluated subnet, the Pareto front, and this tool's sections: the
  uniform-width baseline (every ratio of the pruner, each with BatchNorm
  recalibration), and the chosen subnets and the baseline on the whole validation set;

and by the tool, ``search_plot.png``: FLOPs vs score of all of it (and vs top-1 beside
it when the score is another metric, e.g. the validation loss).

The log ends with a table of each chosen subnet next to the uniform width of nearest
FLOPs and the uniform curve interpolated at the subnet's FLOPs, all on the whole
validation set.  A config mistake is reported with its key and exit code 2 (a
``score_key`` the evaluator does not report before any candidate is scored); a search
refuses to start over the results of an earlier one (``search_results.json``, or an
evolution's ``search_state.json``) unless told ``--overwrite`` (their files are deleted
when the first candidate is scored, after every refusal: no stale subnet file stays
beside the new results) or, for an evolution,
``--resume`` (with the same checkpoint); Ctrl-C ends with one line saying how to resume
(exit code 130).  See docs/tools/search.md.
"""
from __future__ import annotations

import argparse
import inspect
import json
import logging
import math
import runpy
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple

# Only what the arguments need is imported here (no torch), so that --help is instant;
# the functions import the rest.
from mmengine.config import Config, DictAction
from mmengine.logging import print_log

if TYPE_CHECKING:
    from razorlib.engine.hooks import SearchHook
    from razorlib.engine.loops import BaseSearchLoop, SearchResult, SubnetRecord

SEARCH_KEYS = ('model', 'val_dataloader', 'val_evaluator', 'search_cfg')
#: Arguments the Runner passes to a loop itself.
RUNNER_ARGS = ('runner', 'dataloader', 'evaluator')
TOP1 = 'accuracy/top1'
#: The evolution's resumable state, in the work dir.
STATE_FILE = 'search_state.json'
#: What the tool itself writes to the work dir.
PLOT_FILE = 'search_plot.png'
#: razorlib.utils.cli, run from its file beside this folder: ``import razorlib`` loads
#: torch, which --help must not wait for.
at_least = runpy.run_path(str(Path(__file__).resolve().parents[1] / 'razorlib' / 'utils'
                              / 'cli.py'))['at_least']


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='search config: the supernet config plus search_cfg')
    parser.add_argument('checkpoint', help='the trained supernet checkpoint')
    parser.add_argument('--work-dir', help="where the results go (default: the config's "
                        'work_dir, else work_dirs/<config name>)')
    start = parser.add_mutually_exclusive_group()
    start.add_argument('--resume', action='store_true',
                       help=f'continue an evolution search from work_dir/{STATE_FILE} '
                       '(default: refuse to start over a saved state)')
    start.add_argument('--overwrite', action='store_true',
                       help='start afresh over the results of an earlier search in the work '
                       f'dir: its {STATE_FILE}, search_results.json, the subnet files that '
                       f'lists and {PLOT_FILE} are deleted at the first candidate scored '
                       '(default: refuse)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys, e.g. search_cfg.max_epochs=5 '
                        '(default: none)')
    parser.add_argument('--threads', type=at_least(1), metavar='N',
                        help='torch threads (default: 1 for a model under 1M parameters, '
                        'else the idle cores; OMP_NUM_THREADS if set)')
    return parser.parse_args(argv)


def search_loop_class(search_cfg: dict) -> type:
    """The loop ``search_cfg`` names, its arguments checked against its signature.

    Raises:
        ConfigError: naming ``search_cfg.type`` or the unknown argument.
    """
    from razorlib.engine.config import ConfigError
    from razorlib.engine.loops import BaseSearchLoop
    from razorlib.registry import LOOPS

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
    """The runner config: ``search_cfg`` as its val loop, the checkpoint to load, a
    ``DumpSubnetHook`` among its hooks.

    Raises:
        ConfigError: naming the missing or wrong key; or an earlier search's results or
            saved state in the work dir that neither ``--resume`` nor ``--overwrite``
            says what to do with.
    """
    from razorlib.engine.config import ConfigError, check_config, load_config, set_work_dir
    from razorlib.utils.cli import merge_cfg_options

    cfg = merge_cfg_options(load_config(args.config), args.cfg_options, ('search_cfg', ),
                            error=ConfigError)
    check_config(cfg, SEARCH_KEYS)
    loop_cls = search_loop_class(cfg.search_cfg)
    if cfg.search_cfg.get('calib_dataloader') is None and cfg.get('train_dataloader') is None:
        raise ConfigError('train_dataloader: missing; BatchNorm recalibration needs it, or '
                          'search_cfg.calib_dataloader')
    if not Path(args.checkpoint).is_file():
        raise ConfigError(f'checkpoint: {args.checkpoint} does not exist')
    set_work_dir(cfg, args.config, args.work_dir)
    hooks = list(cfg.get('custom_hooks') or [])
    if dump_hook(hooks) is None:
        cfg.custom_hooks = hooks + [dict(type='razorlib.DumpSubnetHook')]
    check_earlier_search(args, cfg, loop_cls)
    cfg.val_cfg = cfg.search_cfg
    cfg.load_from, cfg.resume = args.checkpoint, False
    return cfg


def check_search_data(cfg: Config) -> None:
    """Build the validation dataloader and the recalibration one (``search_cfg``'s
    ``calib_dataloader`` config, else ``train_dataloader``) and read a first batch of
    each before the Runner makes the work dir: an empty dataset, an unknown type or
    argument, or validation batches without the labels the evaluator scores would
    otherwise fail in the Runner, with the work dir and config dump written.

    The Runner builds its own loaders from the configs again (a second dataset scan): it
    seeds them with its seed, known once it is built, and an evolution tells a resumed
    search's data apart by the digest of their configs, which a built loader has not.

    Raises:
        ConfigError: naming the dataloader key at fault
            (:mod:`razorlib.engine.data_check`).
    """
    from razorlib.engine.data_check import checked_loader
    from razorlib.registry import SCOPE

    scope = cfg.get('default_scope') or SCOPE
    checked_loader(cfg.val_dataloader, 'val_dataloader', scope=scope,
                   labels_needed_by='the val_evaluator scores each subnet against them')
    calib = cfg.search_cfg.get('calib_dataloader')
    if calib is None:
        checked_loader(cfg.train_dataloader, 'train_dataloader', scope=scope)
    elif isinstance(calib, dict):  # else a dataloader the config built itself
        checked_loader(calib, 'search_cfg.calib_dataloader', scope=scope)


def check_earlier_search(args: argparse.Namespace, cfg: Config, loop_cls: type) -> None:
    """Point an evolution at its saved state for ``--resume``; refuse to start over an
    earlier search's state or results unless told ``--overwrite``: a new search would
    replace them silently, and one to fewer targets would leave stale subnet files.

    Raises:
        ConfigError: naming the file found (or missing, for ``--resume``).
    """
    from razorlib.engine.config import ConfigError

    state = Path(cfg.work_dir) / STATE_FILE
    resumable = 'resume_from' in inspect.signature(loop_cls).parameters
    if args.resume:
        if not resumable:
            raise ConfigError(f'--resume: {loop_cls.__name__} does not checkpoint its state')
        if not state.is_file():
            raise ConfigError(f'--resume: {state} does not exist; run without --resume to '
                              'start the search')
        cfg.search_cfg.resume_from = str(state)
        return
    if args.overwrite:
        return
    if resumable and state.is_file():
        raise ConfigError(f'{state}: a search was saved here ({generations(state)}); pass '
                          '--resume to continue it, or --overwrite to start again')
    results = results_file(cfg)
    if results.is_file():
        raise ConfigError(f'{results}: a search wrote its results here; pass --overwrite to '
                          'replace them (its subnet files and plot are deleted), or choose '
                          'another --work-dir')


def check_metric_keys(loop: BaseSearchLoop) -> None:
    """Refuse a ``score_key`` or ``tie_break_key`` that the evaluator does not report
    before the search spends any time (and before ``--overwrite`` deletes the earlier
    results): the metric names are read off one validation batch of the supernet as it
    is, as a candidate is scored but for the BatchNorm recalibration and the hooks (the
    names do not depend on the weights).

    Raises:
        ConfigError: naming the key, the closest metrics and all of them.
    """
    import torch
    from mmengine.runner.loops import _parse_losses, _update_losses

    from razorlib.engine.config import ConfigError
    from razorlib.engine.loops.subnet_val_loop import batch_size
    from razorlib.utils.cli import closest

    batch = next(iter(loop.dataloader), None)
    if batch is None:
        return
    loop.runner.model.eval()
    with torch.no_grad():
        outputs, losses = _update_losses(loop.runner.model.val_step(batch), {})
    loop.evaluator.process(data_samples=outputs, data_batch=batch)
    metrics = loop.evaluator.evaluate(batch_size(batch))
    if losses:
        metrics.update(_parse_losses(losses, 'val'))
    for name in ('score_key', 'tie_break_key'):
        key = getattr(loop, name)
        if key is not None and key not in metrics:
            near = closest(key, metrics)
            raise ConfigError(f'search_cfg.{name}: {key!r} is not a metric of the evaluator'
                              + (f' (closest: {", ".join(near)})' if near else '')
                              + f'; it reports {", ".join(sorted(metrics))}')


def check_input_shape(loop: BaseSearchLoop) -> None:
    """Refuse a supernet whose ``input_shape`` is not the size of the validation images its
    subnets are scored on (:func:`razorlib.engine.data_check.check_input_shape`): every
    subnet's FLOPs and params, what ``constraints`` and ``target_flops`` limit and the
    results report, are counted on a ``1 x input_shape`` batch.

    Raises:
        ConfigError: naming ``model.input_shape``, its value and the images' shape.
    """
    from razorlib.engine import data_check

    data_check.check_input_shape(loop.model, loop.dataloader, 'val_dataloader',
                                 'the FLOPs and params the search limits, ranks and reports')


def generations(state: Path) -> str:
    """How far the search saved in ``state`` got, for a message."""
    from razorlib.engine.loops import SearchState

    try:
        return f'{SearchState.load(state).generation} generation(s) done'
    except (OSError, ValueError):
        return 'not a readable search state'


def dump_hook(hooks: Sequence) -> Optional[Any]:
    """The ``DumpSubnetHook`` of a ``custom_hooks`` list (a config, scoped or not, or an
    object), or None."""
    from razorlib.engine.hooks import DumpSubnetHook

    for hook in hooks:
        kind = hook.get('type') if isinstance(hook, dict) else type(hook)
        if kind is DumpSubnetHook or (isinstance(kind, str)
                                      and kind.split('.')[-1] == DumpSubnetHook.__name__):
            return hook
    return None


def results_file(cfg: Config) -> Path:
    """Where the ``DumpSubnetHook`` of ``cfg.custom_hooks`` will write the results JSON
    (its ``out_dir``, else the work dir), so that earlier results are found before the
    search starts."""
    from razorlib.engine.hooks import DumpSubnetHook

    hook = dump_hook(cfg.custom_hooks)
    defaults = inspect.signature(DumpSubnetHook).parameters

    def setting(key: str) -> Any:
        value = hook.get(key) if isinstance(hook, dict) else getattr(hook, key)
        return defaults[key].default if value is None else value

    return Path(setting('out_dir') or cfg.work_dir) / setting('results_file')


class RunnerOutput:
    """What the Runner writes into the work dir, to undo it when the search is refused
    before it scores a candidate (a setting of the loop, a metric the evaluator lacks, a
    target no subnet reaches: checks that need the built Runner): its timestamped log
    folder (:attr:`log_dir`, set once the Runner is built), its config dump (restored
    where one was there before, else removed) and the work dir and its parents where they
    are new and left empty.  Nothing else is touched, so another run writing beside it
    keeps its files.  Once a candidate is scored, they are the search's own
    (:meth:`keep`)."""

    def __init__(self, cfg: Config):
        self.work_dir = Path(cfg.work_dir).resolve()
        missing = [path for path in (self.work_dir, *self.work_dir.parents)
                   if not path.exists()]
        self.new_dirs = missing  # the work dir first, then its new parents
        self.dump = self.work_dir / Path(cfg.filename).name if cfg.filename else None
        self.dump_before = self.dump.read_bytes() if self.dump is not None and \
            self.dump.is_file() else None
        self.log_dir: Optional[Path] = None
        self.kept = False

    def keep(self) -> None:
        """The search started: what the Runner wrote is its log, to keep whatever happens."""
        self.kept = True

    def undo(self) -> None:
        """Remove what the Runner wrote, unless :meth:`keep` was called."""
        if self.kept:
            return
        if self.log_dir is not None:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        if self.dump is not None and self.dump_before is not None:
            self.dump.write_bytes(self.dump_before)
        elif self.dump is not None and self.dump.is_file():
            self.dump.unlink()
        for folder in self.new_dirs:
            if not folder.is_dir() or any(folder.iterdir()):
                break  # another run's files: it stays, and so do its parents
            folder.rmdir()


def clear_results(cfg: Config) -> None:
    """Delete an earlier search's files (``--overwrite``): its saved state, results JSON,
    the subnet files that JSON lists and the plot, so that none is left beside the new
    results (a greedy search to fewer targets would leave some)."""
    results = results_file(cfg)
    for path in [*listed_subnets(results), results, Path(cfg.work_dir) / STATE_FILE,
                 Path(cfg.work_dir) / PLOT_FILE]:
        path.unlink(missing_ok=True)


def listed_subnets(results: Path) -> List[Path]:
    """The subnet files a results JSON lists beside itself (none if it is missing or not
    readable: only the hook's own files are ever deleted)."""
    try:
        chosen = json.loads(results.read_text())['chosen']
        files = [results.parent / entry['file'] for entry in chosen.values() if entry['file']]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    return [path for path in files if path.resolve().parent == results.parent.resolve()]


def interrupted(args: argparse.Namespace, cfg: Optional[Config]) -> str:
    """The one line Ctrl-C ends with: where the state is and how to resume."""
    if cfg is None or 'resume_from' not in inspect.signature(
            search_loop_class(cfg.search_cfg)).parameters:
        return 'interrupted; this search keeps no state, run the same command to start again'
    state = Path(cfg.work_dir) / STATE_FILE
    if not state.is_file():
        return ('interrupted before the first generation ended; nothing saved, run the '
                'same command (with --overwrite if asked) to start again')
    # the --cfg-options too: the saved settings and data digests came from them, and a
    # resume without them is refused (or scores other data)
    options = [f'{key}={cfg_option_text(value)}' for key, value in (args.cfg_options or {}).items()]
    command = shlex.join(['python', 'tools/search.py', args.config, args.checkpoint,
                          *(['--cfg-options', *options] if options else []),
                          '--work-dir', str(cfg.work_dir), '--resume'])
    return f'interrupted; the search state ({generations(state)}) is in {state}: ' \
        f'continue with `{command}`'


def cfg_option_text(value: Any) -> str:
    """A ``--cfg-options`` value as text that mmengine's ``DictAction`` parses back to
    ``value`` (its lists and tuples in brackets, the rest as ``str`` writes it)."""
    if isinstance(value, (list, tuple)):
        items = ','.join(cfg_option_text(item) for item in value)
        return f'({items})' if isinstance(value, tuple) else f'[{items}]'
    return str(value)


def uniform_baseline(loop: BaseSearchLoop, full: bool) -> List[SubnetRecord]:
    """Every space at each of the pruner's ratios, scored as the search scores; none for
    a space without widths (a NAS space of op choices)."""
    if not hasattr(loop.space, 'uniform'):
        return []
    return [loop.evaluate(loop.space.uniform(ratio), f'uniform x{ratio:.2f}', full)
            for ratio in sorted(loop.space.pruner.ratios)]


def on_full_val(loop: BaseSearchLoop, records: Dict[str, SubnetRecord]) -> Dict[str, SubnetRecord]:
    """``records`` scored on the whole validation set (the same if the search was)."""
    if loop.val_batches is None:
        return dict(records)
    return {name: loop.evaluate(r.widths, f'{name} (full val)', full=True)
            for name, r in records.items()}


def start_hook(cfg: Config, overwrite: bool, output: RunnerOutput) -> SearchHook:
    """A :class:`Started` hook (defined here: its base class imports torch)."""
    from razorlib.engine.hooks import SearchHook

    class Started(SearchHook):
        """At the first candidate scored, keep what the Runner wrote and, for
        ``--overwrite``, delete the earlier search's files: the loop refuses before it
        (a target or a limit no subnet reaches), and a refused search deletes nothing."""

        def after_search_candidate(self, runner, record: SubnetRecord) -> None:
            if not output.kept:
                output.keep()
                if overwrite:
                    clear_results(cfg)

    return Started()


def baseline_hook() -> SearchHook:
    """A :class:`Baseline` hook (defined here: its base class imports torch)."""
    from razorlib.engine.hooks import SearchHook

    class Baseline(SearchHook):
        """At the end of the search, score the uniform widths as the candidates were scored,
        and the chosen subnets and the uniform widths on the whole validation set, into the
        results' ``extra`` sections (``uniform``, ``uniform_full_val``,
        ``chosen_full_val``) that ``DumpSubnetHook`` writes after it."""
        priority = 'NORMAL'  # before DumpSubnetHook (LOW)

        def __init__(self):
            self.uniform: List[SubnetRecord] = []
            self.uniform_full: List[SubnetRecord] = []
            self.chosen_full: Dict[str, SubnetRecord] = {}

        def after_search(self, runner, result: SearchResult) -> None:
            loop: BaseSearchLoop = runner.val_loop
            self.uniform = uniform_baseline(loop, full=False)
            self.uniform_full = self.uniform if loop.val_batches is None \
                else uniform_baseline(loop, full=True)
            self.chosen_full = on_full_val(loop, result.chosen)
            result.extra.update(
                uniform=[r.to_dict() for r in self.uniform],
                uniform_full_val=[r.to_dict() for r in self.uniform_full],
                chosen_full_val={name: r.to_dict() for name, r in self.chosen_full.items()})

    return Baseline()


def panels(loop: BaseSearchLoop, records: List[SubnetRecord]) -> List[Tuple[str, str]]:
    """The (metric, rule) pairs the plot draws: the search's score, and top-1 beside it
    when the search ranked by something else (a loss) and the evaluator reports top-1."""
    drawn = [(loop.score_key, loop.score_rule)]
    if loop.score_key != TOP1 and all(TOP1 in r.metrics for r in records):
        drawn.append((TOP1, 'greater'))
    return drawn


def finite(values: Iterable[float]) -> List[float]:
    """The finite ones of ``values``: what an axis can be scaled to."""
    return [value for value in values if math.isfinite(value)]


def plot(path: Path, records: List[SubnetRecord], uniform: List[SubnetRecord],
         chosen: Dict[str, SubnetRecord], metrics: List[Tuple[str, str]], title: str) -> None:
    """FLOPs vs each of ``metrics`` (one panel per ``(key, rule)``, better upwards):
    every evaluated subnet, their Pareto front, uniform widths and the chosen subnets."""
    from razorlib.engine.loops import pareto_front
    from razorlib.utils.complexity import human
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, axes = plt.subplots(1, len(metrics), figsize=(7 * len(metrics), 5), dpi=120,
                             squeeze=False)
    for ax, (key, rule) in zip(axes[0], metrics):
        sign = 1.0 if rule == 'greater' else -1.0
        # The axis ends a little beyond the uniform curve and the chosen subnets, so that
        # a few very poor candidates do not squash the part that matters; NaN scores (a
        # diverged subnet) are off the axis.
        shown = finite(sign * r.value(key) for r in uniform + records)
        worst = min(finite(sign * r.value(key) for r in uniform + list(chosen.values())),
                    default=min(shown, default=0.0))
        best = max(shown, default=worst)
        pad = 0.1 * (best - worst) or 0.5
        hidden = sum(not sign * r.value(key) >= worst - pad for r in records)
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
    import numpy as np

    ordered = sorted(uniform, key=lambda r: r.flops)
    return float(np.interp(flops, [r.flops for r in ordered], [r.value(key) for r in ordered]))


def comparison_table(chosen: Dict[str, SubnetRecord], uniform: List[SubnetRecord],
                     key: str) -> List[str]:
    """Each chosen subnet's metric ``key``, that of the uniform width of nearest FLOPs,
    and the uniform curve at the subnet's own FLOPs (``delta`` is against that)."""
    from razorlib.engine.loops import nearest
    from razorlib.utils.complexity import human

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
    from razorlib.engine.checkpoint_check import (CheckpointError, check_fits,
                                                  read_checkpoint, state_dict_of)
    from razorlib.engine.config import ConfigError
    from razorlib.engine.threads import set_threads
    from razorlib.engine.utils import build_runner, unwrap
    from razorlib.utils.cli import refuse

    cfg = output = None
    try:
        cfg = prepare_config(args)
        check_search_data(cfg)
        checkpoint = read_checkpoint(args.checkpoint)  # before the Runner makes the work dir
        output = RunnerOutput(cfg)
        runner = build_runner(cfg)
        output.log_dir = Path(runner.log_dir)
        # the Runner's model, not one built for the check: what a refusal wrote is undone
        check_fits(unwrap(runner.model), state_dict_of(checkpoint), args.checkpoint)
        runner.logger.info(f'threads: {set_threads(args.threads, unwrap(runner.model))}')
        loop: BaseSearchLoop = runner.val_loop  # built here: its settings are checked
        loop.check_model()  # a supernet it cannot search (DARTS; greedy without a pruner)
        check_input_shape(loop)  # FLOPs counted on other images than those scored
        check_metric_keys(loop)  # before --overwrite deletes anything
        baseline = baseline_hook()
        runner.register_hook(baseline)
        runner.register_hook(start_hook(cfg, args.overwrite, output))
        result: SearchResult = runner.val()
    except (CheckpointError, ConfigError) as err:
        if output is not None:
            output.undo()
        return refuse(err, None if isinstance(err, CheckpointError) else args.config)
    except KeyboardInterrupt:
        print_log(interrupted(args, cfg), logger='current', level=logging.WARNING)
        return 130
    logger, work_dir = runner.logger, Path(cfg.work_dir)
    split = ('whole validation set' if loop.val_batches is None
             else f'first {loop.val_batches} validation batches')
    plot(work_dir / PLOT_FILE, result.records, baseline.uniform, result.chosen,
         panels(loop, result.records), f'{cfg.search_cfg.type}, scored on the {split}')
    if baseline.uniform_full:
        logger.info('chosen subnets vs uniform widths (whole validation set):')
        for key, _ in panels(loop, result.records):
            for line in comparison_table(baseline.chosen_full, baseline.uniform_full, key):
                logger.info(line)
    logger.info(f'wrote {work_dir / PLOT_FILE}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
