"""What the command-line tools share: argparse types for numeric flags, the check of
``--cfg-options`` keys, the refusal of a work dir that holds an earlier run's results, and
the one line (exit code 2) that reports a refused run.

The tools read this file by its path before their arguments are parsed (``import
razorlib`` loads torch, and ``--help`` answers at once), so at import it needs only the
standard library; the functions that ask mmengine or torch import them when called.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import inspect
import logging
import math
from pathlib import Path
from typing import (TYPE_CHECKING, Any, Callable, Collection, Iterator, List, Mapping,
                    Optional, Sequence, Type, Union)

if TYPE_CHECKING:
    from mmengine.config import Config

__all__ = ['RUNNER_KEYS', 'at_least', 'check_earlier_results', 'closest', 'in_range',
           'merge_cfg_options', 'refuse']

#: Interval notations :func:`in_range` takes: which ends belong to the range.
ENDS = ('[]', '(]', '[)', '()')

#: Top-level keys mmengine 0.10's Runner reads from a config (``Runner.from_cfg`` and the
#: ``cfg.get`` of its methods): ``--cfg-options`` may set one that the config leaves out.
RUNNER_KEYS = (
    'model', 'work_dir', 'train_dataloader', 'val_dataloader', 'test_dataloader', 'train_cfg',
    'val_cfg', 'test_cfg', 'auto_scale_lr', 'optim_wrapper', 'param_scheduler', 'val_evaluator',
    'test_evaluator', 'default_hooks', 'custom_hooks', 'data_preprocessor', 'load_from',
    'resume', 'launcher', 'env_cfg', 'log_processor', 'log_level', 'visualizer',
    'default_scope', 'randomness', 'experiment_name', 'model_wrapper_cfg', 'compile',
    'activation_checkpointing', 'efficient_conv_bn_eval', 'find_unused_parameters', 'sync_bn')


def at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer of at least ``low``, so that a count out of range is
    refused by the parser (exit code 2, naming the flag) before anything is read or written.

    Example:
        >>> parser = argparse.ArgumentParser(prog='tool', exit_on_error=False)
        >>> _ = parser.add_argument('--top', type=at_least(1))
        >>> parser.parse_args(['--top', '20']).top
        20
        >>> parser.parse_args(['--top', '0'])
        Traceback (most recent call last):
        ...
        argparse.ArgumentError: argument --top: expected an integer of at least 1, got '0'
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(
                f'expected an integer of at least {low}, got {text!r}')
        return value

    return parse


def in_range(low: float, high: float, ends: str = '[]') -> Callable[[str], float]:
    """An argparse ``type``: a number between ``low`` and ``high``.

    Args:
        low: the lower end.
        high: the upper end (``math.inf`` for none: a positive number is
            ``in_range(0, math.inf, '()')``).
        ends: which ends belong to the range, in interval notation: ``'[]'`` both,
            ``'(]'`` all but ``low``, ``'[)'`` all but ``high``, ``'()'`` neither.
            Not-a-number is never in it.

    Example:
        >>> fraction = in_range(0, 1, '(]')
        >>> fraction('0.5'), fraction('1')
        (0.5, 1.0)
        >>> fraction('0')
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: expected a number in (0, 1], got '0'
    """
    if ends not in ENDS:
        raise ValueError(f'ends: one of {ENDS}, got {ends!r}')
    above = (lambda v: v >= low) if ends[0] == '[' else (lambda v: v > low)
    below = (lambda v: v <= high) if ends[1] == ']' else (lambda v: v < high)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (above(value) and below(value)):
            raise argparse.ArgumentTypeError(
                f'expected a number in {ends[0]}{low:g}, {high:g}{ends[1]}, got {text!r}')
        return value

    return parse


def closest(word: str, known: Collection[str], n: int = 3) -> List[str]:
    """The (at most ``n``) names of ``known`` most like ``word``, best first (difflib).

    Example:
        >>> closest('accuracy/top_1', ['accuracy/top1', 'accuracy/top5', 'loss'])
        ['accuracy/top1', 'accuracy/top5']
    """
    return difflib.get_close_matches(word, list(known), n=n, cutoff=0.6)


def merge_cfg_options(cfg: Config, options: Optional[Mapping[str, Any]],
                      tool_keys: Collection[str] = (),
                      error: Type[Exception] = ValueError) -> Config:
    """Merge ``--cfg-options`` into ``cfg`` (``Config.merge_from_dict``) once every key is
    known to set something, so that a misspelled key is refused before anything runs,
    rather than being ignored or failing later in torch or mmengine.

    A key is taken when its path exists in the config (an item of a list by its index, as
    mmengine takes it: ``param_scheduler.1.T_max``), or when it adds a key that something
    will check or use:

    - under a dict with a ``type`` (the registered class takes it or refuses it, as
      ``check_config`` and the search loops report, naming the key), unless it is one
      letter off a key that dict sets (``intervall`` beside ``interval``), which a class
      taking ``**kwargs`` would take and ignore;
    - to a section the Runner passes on as arguments without a ``type`` (a
      ``*_dataloader``: torch's ``DataLoader``; ``train_cfg``, ``val_cfg``, ``test_cfg``:
      mmengine's loops; ``randomness``, ``env_cfg``, ``auto_scale_lr``), one they take;
    - at the top, one of :data:`RUNNER_KEYS` or of ``tool_keys``;
    - anywhere under one of ``tool_keys``.

    Args:
        cfg: the config, changed in place.
        options: ``{'dotted.key': value}`` as ``DictAction`` parses them; None: none.
        tool_keys: top-level sections the tool reads and checks itself (``ptq``).
        error: the exception to raise (a tool's ``ConfigError``).

    Returns:
        ``cfg``.

    Raises:
        error: ``--cfg-options KEY: ...``, with the closest keys the config has.

    Example:
        >>> from mmengine.config import Config
        >>> cfg = Config(dict(model=dict(depth=18), train_cfg=dict(max_epochs=30)))
        >>> options = {'model.depth': 50, 'train_cfg.val_interval': 5}
        >>> merge_cfg_options(cfg, options).to_dict()
        {'model': {'depth': 50}, 'train_cfg': {'max_epochs': 30, 'val_interval': 5}}
        >>> merge_cfg_options(cfg, {'model.dept': 34})
        Traceback (most recent call last):
        ...
        ValueError: --cfg-options model.dept: the config has no such key (closest: model.depth)
    """
    if not options:
        return cfg
    tree = cfg.to_dict()
    for key in options:
        problem = _cfg_option_problem(tree, key, tuple(tool_keys))
        if problem:
            raise error(f'--cfg-options {key}: {problem}')
    cfg.merge_from_dict(dict(options))
    return cfg


def _cfg_option_problem(tree: Mapping[str, Any], key: str, tool_keys: Sequence[str]
                        ) -> Optional[str]:
    """Why ``key`` sets nothing in the config ``tree``, or None when it does."""
    parts = key.split('.')
    node: Any = tree
    typed = False  # a dict on the way has a type: its class checks the keys below it
    for depth, part in enumerate(parts):
        walked = '.'.join(parts[:depth])
        if isinstance(node, Mapping):
            typed = typed or 'type' in node
            if part in node:
                node = node[part]
                continue
            if _may_add(parts[:depth + 1], typed, tool_keys, tree) and \
                    not _misspelt(part, node):
                if depth == 0 and len(parts) > 1 and part not in tool_keys:
                    return _absent_section_problem(part, parts[1])
                return None
            return _no_such_key(tree, key, walked, node, tool_keys)
        if isinstance(node, list):
            if not part.isdigit():
                return f'{walked} is a list: name an item by its index, e.g. {walked}.0'
            if int(part) >= len(node):
                return (f'{walked} has {len(node)} items'
                        + (f', indexed 0 to {len(node) - 1}' if node else ''))
            if depth == len(parts) - 1 or not isinstance(node[int(part)], Mapping):
                return (f'mmengine sets the keys of the dicts in a list, not its items; give '
                        f'the whole list: {walked}=[...]')
            node = node[int(part)]
            continue
        return f'{walked} = {node!r}, not a dict of keys; give its whole value: {walked}=...'
    return None


def _may_add(path: Sequence[str], typed: bool, tool_keys: Sequence[str],
             tree: Mapping[str, Any]) -> bool:
    """Whether a key the config does not have, at ``path``, is one something checks or
    uses (see :func:`merge_cfg_options`)."""
    if path[0] in tool_keys or typed:
        return True
    if len(path) == 1:
        return path[0] in RUNNER_KEYS
    return len(path) == 2 and path[1] in _section_arguments(path[0], tree.get(path[0]))


#: Runner sections a config may leave out, and the class the Runner then builds with the
#: section's keys as arguments.
_BUILT_BY_DEFAULT = {'log_processor': 'mmengine.runner.LogProcessor',
                     'visualizer': 'mmengine.visualization.Visualizer'}


def _absent_section_problem(section: str, name: str) -> Optional[str]:
    """Why ``section.name`` (a Runner section the config leaves out) sets nothing: the
    class the Runner builds for it by default, or what the Runner hands its keys to (a
    DataLoader, a loop, ``set_randomness``; of ``env_cfg`` and ``auto_scale_lr`` it reads
    a few keys and ignores any other, ``auto_scale_lr.enabel`` scaling nothing), takes no
    such argument; None when it does, or when nothing is known to check it by."""
    if section in _BUILT_BY_DEFAULT:
        module, _, cls = _BUILT_BY_DEFAULT[section].rpartition('.')
        taken = _parameters(getattr(importlib.import_module(module), cls).__init__)
        problem = (f'the config has no {section}, and the {cls} the Runner builds without '
                   f'one takes no argument {name!r}')
    else:
        taken = _section_arguments(section)
        problem = f'the config has no {section}, and the Runner reads no {name!r} in one'
    if not taken or name in taken:
        return None
    near = closest(name, taken)
    return problem + (f' (closest: {section}.{near[0]})' if near else '')


def _misspelt(name: str, node: Mapping[str, Any]) -> bool:
    """Whether ``name`` is one letter off a key of four or more letters that ``node`` sets
    (a letter added, dropped or changed, or two side by side swapped: ``intervall``,
    ``dept``, ``sizr``; not ``out_channels`` beside ``in_channels``): a class that takes
    ``**kwargs`` would take it, and ignore it, unchecked."""
    return any(len(key) >= 4 and _one_letter_apart(name, key) for key in map(str, node))


def _one_letter_apart(a: str, b: str) -> bool:
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _section_arguments(section: str, value: Any = None) -> Collection[str]:
    """The keys a top-level section without a ``type`` may set that the Runner passes on
    as arguments: its DataLoader's, its loop's (``train_cfg``'s by its ``by_epoch``, as
    the Runner picks the loop), ``set_randomness``'s; none for others."""
    if section.endswith('_dataloader'):
        from torch.utils.data import DataLoader
        return _parameters(DataLoader)
    if section in ('train_cfg', 'val_cfg', 'test_cfg'):
        from mmengine.runner import loops
        by_epoch = value.get('by_epoch') if isinstance(value, Mapping) else None
        train = {True: (loops.EpochBasedTrainLoop, ), False: (loops.IterBasedTrainLoop, )}.get(
            by_epoch, (loops.EpochBasedTrainLoop, loops.IterBasedTrainLoop))
        classes = {'train_cfg': train, 'val_cfg': (loops.ValLoop, ),
                   'test_cfg': (loops.TestLoop, )}[section]
        taken = {name for cls in classes for name in _parameters(cls)}
        return (taken | {'type', 'by_epoch'}) - {'runner', 'dataloader', 'evaluator'}
    if section == 'randomness':
        from mmengine.runner import Runner
        return _parameters(Runner.set_randomness)
    return {'env_cfg': ('cudnn_benchmark', 'mp_cfg', 'dist_cfg', 'resource_limit'),
            'auto_scale_lr': ('enable', 'base_batch_size')}.get(section, ())


def _parameters(function: Callable) -> List[str]:
    return [name for name in inspect.signature(function).parameters if name != 'self']


def _no_such_key(tree: Mapping[str, Any], key: str, walked: str, node: Mapping[str, Any],
                 tool_keys: Sequence[str]) -> str:
    """The refusal of ``key``, missing below ``walked`` (the dict ``node``): the closest
    keys of its depth that the config has or could take, else the closest beside the
    missing one, else all those beside it."""
    known = set(_paths(tree)) | set(RUNNER_KEYS) | set(tool_keys) | {
        f'{section}.{name}' for section, value in tree.items()
        if isinstance(value, Mapping) and 'type' not in value
        for name in _section_arguments(section, value)}
    near = closest(key, {path for path in known if path.count('.') == key.count('.')})
    if near:
        return f'the config has no such key (closest: {", ".join(near)})'
    prefix = f'{walked}.' if walked else ''
    missing = key[len(prefix):].split('.')[0]
    near = closest(missing, {path[len(prefix):] for path in known
                             if path.startswith(prefix) and '.' not in path[len(prefix):]})
    if near:
        return f'{walked or "the config"} has no key {missing} (closest: ' \
            f'{", ".join(prefix + name for name in near)})'
    return f'{walked or "the config"} has no key {missing}; it has ' \
        f'{", ".join(sorted(str(name) for name in node))}'


def _paths(node: Any, prefix: str = '') -> Iterator[str]:
    """Every dotted key of a config tree, list items by their index, parents first."""
    items = node.items() if isinstance(node, Mapping) else \
        enumerate(node) if isinstance(node, list) else ()
    for name, child in items:
        path = f'{prefix}{name}'
        yield path
        yield from _paths(child, path + '.')


def check_earlier_results(work_dir: Union[str, Path], names: Sequence[str], overwrite: bool,
                          error: Type[Exception] = ValueError) -> None:
    """Refuse a work dir that holds any of ``names`` (the files a tool writes) unless
    ``overwrite`` (``--overwrite``) says to replace them: a second run would otherwise
    replace an earlier one's results silently.

    Raises:
        error: naming the files found.

    Example:
        >>> import tempfile
        >>> work_dir = Path(tempfile.mkdtemp())
        >>> check_earlier_results(work_dir, ['ptq.json'], overwrite=False)  # none yet
        >>> _ = (work_dir / 'ptq.json').write_text('{}')
        >>> check_earlier_results(work_dir, ['ptq.json'], overwrite=True)
        >>> check_earlier_results(work_dir, ['ptq.json'], overwrite=False)
        Traceback (most recent call last):
        ...
        ValueError: ...: holds the ptq.json of an earlier run; pass --overwrite to replace them, ...
    """
    earlier = [name for name in names if (Path(work_dir) / name).exists()]
    if earlier and not overwrite:
        listed = ' and '.join(earlier) if len(earlier) < 3 else \
            f'{", ".join(earlier[:-1])} and {earlier[-1]}'
        raise error(f'{work_dir}: holds the {listed} of an earlier run; pass --overwrite to '
                    'replace them, or choose another --work-dir')


def refuse(err: object, where: Optional[str] = None) -> int:
    """Log why a tool refuses to run (at ERROR level) and return 2, the exit code every
    tool gives a refused run, so that a script tells a mistake in the inputs from a crash
    (a traceback, exit code 1).

    Args:
        err: the mistake (an exception or a message).
        where: what holds the mistake, put before ``err``: the CONFIG file (for a mistake
            in the config or what it names) or a flag (``--subnet FILE``); None for a
            message that names its own file (a checkpoint cut short, a work dir holding an
            earlier run's results).

    Returns:
        2, for the tool's ``main`` to return.
    """
    from mmengine.logging import print_log  # here: the module must import without mmengine
    print_log(str(err) if where is None else f'{where}: {err}', logger='current',
              level=logging.ERROR)
    return 2
