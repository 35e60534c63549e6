"""Prune a model, check the slim model and save it with its channel config.

Examples:
    # a trained supernet (an AutoSlim config + its checkpoint) sliced to a searched subnet
    python tools/prune.py CONFIG CHECKPOINT --subnet SUBNET_YAML [--work-dir DIR]
    # a built-in model, pruned with a pruner at one ratio
    python tools/prune.py --model resnet50 --ratio 0.5 --work-dir work_dirs/prune_resnet50
    # to a budget: half the FLOPs, channels ranked globally by Taylor on data batches
    python tools/prune.py --model resnet50 --flops 0.5 --importance taylor --global \\
        --round-to 8 --max-ratio 0.9 [--data-config CONFIG]
    # each group's width from the loss it costs, cut alone (FastNAS's allocation)
    python tools/prune.py --model resnet50 --flops 0.5 --sensitivity [--data-config CONFIG]
    # cut by cut, each the cheapest in loss per FLOP saved (NetAdapt's greedy slimming)
    python tools/prune.py --model resnet50 --flops 0.5 --greedy [--data-config CONFIG]
    # to half the latency measured on onnxruntime
    python tools/prune.py --model mobilenet_v2 --latency 0.5 --runtime onnxruntime --global

All log parameters, FLOPs and latency before and after (and the kept channels of each
group for --model), check that the masked supernet and the sliced model give the same
outputs, re-estimate the slim model's batch norms on training batches (CONFIG's
train_dataloader, or --model's data batches when it read any), and write
``channel_cfg.yaml`` and ``slim.pth`` (the slim model's state_dict).
Rebuild the slim model without the supernet and its pruner::

    model = MODELS.build(architecture_cfg)   # cfg.model.architecture, or the built-in model
    slim_model(model, 'channel_cfg.yaml').load_state_dict(torch.load('slim.pth'))

A mistake in the arguments (an option of the other mode among them), a checkpoint that
is cut short or not of the supernet, a --data-config that gives no usable batches (no
targets for a criterion scoring by the loss), a work dir holding an earlier result
without --overwrite: one line, exit code 2, and nothing written.  See docs/tools/prune.md.
"""
from __future__ import annotations

import argparse
import copy
from itertools import islice
import runpy
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Sequence, Tuple

# Only what the arguments need is imported here (no torch), so that --help is instant;
# the functions import the rest.
from mmengine.config import DictAction

if TYPE_CHECKING:
    import torch
    import torch.nn as nn
    from mmengine.config import Config
    from mmengine.logging import MMLogger

    from razorlib.pruning import ChannelConfig

#: ``--model`` name -> the registered model it builds (``razorlib.registry.MODELS``).
BUILT_IN = {
    **{f'resnet{d}': dict(type='ResNet', depth=d, num_classes=1000)
       for d in (18, 34, 50, 101, 152)},
    'mobilenet_v2': dict(type='MobileNetV2', num_classes=1000),
    'shufflenet_v2': dict(type='ShuffleNetV2', num_classes=1000),
    'plain_cnn': dict(type='PlainCNN', num_classes=10),
}
#: The dense model, the masked one, its channel config, the example input, and the inputs
#: the slim model's batch norms are re-estimated on (None: keep them).
Pruned = Tuple['nn.Module', 'nn.Module', 'ChannelConfig', 'torch.Tensor',
               Optional[Iterable['torch.Tensor']]]
#: The --data-config key the data batches come from.
DATA_KEY = 'train_dataloader'
#: Options of one mode only, refused in the other when given (even at their default).
MODEL_ONLY = ('--model', '--pruner', '--ratio', '--flops', '--params', '--latency',
              '--importance', '--global', '--sensitivity', '--greedy', '--round-to',
              '--max-ratio', '--data-config', '--data-batches', '--input-size', '--batch',
              '--except-start-keys')
CONFIG_ONLY = ('--subnet', '--cfg-options', '--recalib-batches')
#: What the tool writes; a work dir holding either is refused without --overwrite.
RESULTS = ('channel_cfg.yaml', 'slim.pth')
#: razorlib.utils.cli, run from its file beside this folder: ``import razorlib`` loads
#: torch, which --help must not wait for.
CLI = runpy.run_path(str(Path(__file__).resolve().parents[1] / 'razorlib' / 'utils' / 'cli.py'))
at_least, in_range = CLI['at_least'], CLI['in_range']
#: The type of a budget: a fraction of the dense model in (0, 1], as the pruners take it.
fraction = in_range(0, 1, '(]')


class Unset:
    """An option's value before parsing; false, so that actions that merge into the
    current value (``DictAction``) start from nothing."""

    def __bool__(self) -> bool:
        return False


UNSET = Unset()


def dest_of(option: str) -> str:
    """The attribute argparse stores ``option`` in."""
    return 'global_ranking' if option == '--global' else option[2:].replace('-', '_')


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', nargs='?',
                        help='a supernet (AutoSlim) config (default: none, prune --model)')
    parser.add_argument('checkpoint', nargs='?',
                        help="the supernet's checkpoint (needed with CONFIG)")
    parser.add_argument('--subnet', help='the subnet channel config (YAML/JSON) to keep '
                        '(default: none; needed with CONFIG)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys (default: none)')
    parser.add_argument('--recalib-batches', type=at_least(0), default=16, metavar='N',
                        help="CONFIG's train_dataloader batches the slim model's batch norms "
                        'are re-estimated on, as the search recalibrates each candidate; 0 '
                        "keeps the supernet's statistics (default: %(default)s, the search "
                        "loops' default)")
    parser.add_argument('--model', default='resnet50', choices=sorted(BUILT_IN),
                        help='built-in model to prune without CONFIG (default: %(default)s)')
    parser.add_argument('--pruner', default='L1NormPruner',
                        choices=['L1NormPruner', 'RatioPruner'],
                        help='how --model keeps channels: the largest L1 norms, or the first '
                        'ones (default: %(default)s)')
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument('--ratio', type=fraction,
                        help='fraction of channels to keep (default: 0.5 when no budget is '
                        'given)')
    budget.add_argument('--flops', type=fraction,
                        help="keep at most this fraction of the dense model's FLOPs "
                        '(default: no FLOPs budget)')
    budget.add_argument('--params', type=fraction,
                        help="keep at most this fraction of the dense model's parameters "
                        '(default: no params budget)')
    budget.add_argument('--latency', type=fraction,
                        help="run in at most this fraction of the dense model's latency on "
                        '--runtime (default: no latency budget)')
    parser.add_argument('--importance', default='l1',
                        help='the criterion ranking channels: l1, l2, bn_scale, fpgm, taylor, '
                        'fisher, activation, apoz, wanda, random (default: %(default)s)')
    parser.add_argument('--global', dest='global_ranking', action='store_true',
                        help="rank all groups' channels together (default: one ratio per "
                        'group)')
    parser.add_argument('--sensitivity', action='store_true',
                        help="give each group the width whose loss increase, the group cut "
                        'alone and measured on the data batches, stays under one threshold '
                        'for all groups (FastNAS\'s allocation; default: one ratio per group)')
    parser.add_argument('--greedy', action='store_true',
                        help='cut one group a step at a time, each time the one whose loss '
                        'increase on the data batches per unit of the budget saved is least, '
                        'until the budget (greedy slimming; default: one ratio per group)')
    parser.add_argument('--round-to', type=at_least(1), default=1, metavar='N',
                        help="each group keeps a multiple of N channels (default: %(default)s)")
    parser.add_argument('--max-ratio', type=in_range(0, 1, '[)'), metavar='R',
                        help='the largest fraction of one group that may be pruned '
                        '(default: none)')
    parser.add_argument('--runtime', default='torch', choices=['torch', 'onnxruntime', 'cuda'],
                        help='where latency is measured, on --threads threads (default: '
                        '%(default)s)')
    parser.add_argument('--runtime-options', nargs='+', action=DictAction,
                        metavar='KEY=VALUE',
                        help="the runtime's options, e.g. for cuda graph=True dtype=float16 "
                        'channels_last=True: CUDA-graph replays of the FP16 NHWC model, as '
                        'deployed (default: none)')
    parser.add_argument('--quantile', type=in_range(0, 1), default=0.5, metavar='Q',
                        help='the quantile of the timed runs taken as latency: 0.5 the median; '
                        'a low one (0.1) is steadier on a machine busier than its cores '
                        '(default: %(default)s)')
    parser.add_argument('--data-config', metavar='CONFIG',
                        help="a config whose train_dataloader gives the batches data-driven "
                        'criteria (taylor, fisher, activation, apoz) run on and batch norms '
                        "are re-estimated on (default: the digits train split, resized to "
                        '--input-size)')
    parser.add_argument('--data-batches', type=at_least(1), default=8, metavar='N',
                        help='batches read from the data, when a data criterion, '
                        '--sensitivity, --greedy or --data-config reads any (default: '
                        '%(default)s)')
    parser.add_argument('--input-size', type=at_least(1), default=224,
                        help="--model's square input side (default: %(default)s)")
    parser.add_argument('--batch', type=at_least(1), default=1,
                        help="--model's example input batch: its latency is measured at this "
                        'batch (default: %(default)s)')
    parser.add_argument('--except-start-keys', nargs='*', default=[], metavar='PREFIX',
                        help="module-name prefixes whose output channels stay (default: none)")
    parser.add_argument('--work-dir', default=None,
                        help='where the files go (default: work_dirs/prune_<model or config '
                        'name>)')
    parser.add_argument('--overwrite', action='store_true',
                        help=f'replace the {" and ".join(RESULTS)} of an earlier run in the '
                        'work dir (default: refuse)')
    parser.add_argument('--seed', type=int, default=0,
                        help="random seed of --model's initial weights, the example input "
                        'and the order of the data batches (default: %(default)s)')
    parser.add_argument('--threads', type=at_least(1), metavar='N',
                        help='torch threads (default: 1 for a model under 1M parameters, '
                        'else the idle cores; OMP_NUM_THREADS if set)')
    return parser


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The arguments, with ``explicit``: the options of one mode only that were given
    (even at their default value), for :func:`check_mode` to refuse in the other mode; and
    ``criterion``: --importance built, once, for what the run asks of it and the pruner."""
    parser, options = build_parser(), MODEL_ONLY + CONFIG_ONLY
    # argparse sets no default where the namespace already holds a value: the options
    # still UNSET after parsing were not given, and get their defaults then
    args = parser.parse_args(argv, argparse.Namespace(**{dest_of(o): UNSET for o in options}))
    args.explicit = [o for o in options if getattr(args, dest_of(o)) is not UNSET]
    for option in options:
        if getattr(args, dest_of(option)) is UNSET:
            setattr(args, dest_of(option), parser.get_default(dest_of(option)))
    from razorlib.pruning import build_importance
    try:
        args.criterion = build_importance(args.importance)
    except KeyError as err:
        parser.error(f'--importance: {err.args[0]}')
    try:
        runtime_cfg(args)
    except (TypeError, ValueError) as err:
        parser.error(f'--runtime-options: {err}')
    if args.runtime == 'cuda':  # the costs are timed on it after any budget: check it first
        import torch
        if not torch.cuda.is_available():
            parser.error("--runtime cuda: torch.cuda.is_available() is False on this machine; "
                         'measure on torch (CPU) or onnxruntime instead')
    chosen = [flag for flag, on in (('--global', args.global_ranking),
                                    ('--sensitivity', args.sensitivity),
                                    ('--greedy', args.greedy)) if on]
    if len(chosen) > 1:
        parser.error(f'choose one allocation: {" or ".join(chosen)}')
    if args.pruner == 'RatioPruner':  # it takes the ratio alone: the others would be ignored
        budget = budget_of(args)[0]
        unused = [flag for flag, given in (
            ('--importance', args.importance != 'l1'), *((flag, True) for flag in chosen),
            (f'--{budget}', budget not in ('', 'ratio')), ('--round-to', args.round_to != 1),
            ('--max-ratio', args.max_ratio is not None)) if given]
        if unused:
            parser.error(f'{", ".join(unused)}: for L1NormPruner (the default) only; '
                         '--pruner RatioPruner keeps the first --ratio of every group\'s '
                         'channels')
    # without --data-config, --model's batches are read only for what ranks or allocates
    # by them: CONFIG mode's check_mode refuses the option as misplaced instead
    if '--data-batches' in args.explicit and not (args.config or args.data_config
                                                  or reads_data(args)):
        if args.pruner == 'RatioPruner':
            free, other = '--pruner RatioPruner', ''
        else:
            free = f'--importance {args.importance}'
            *first, last = data_criteria()
            other = (', or a criterion or allocation reading data (--importance '
                     f'{", ".join(first)} or {last}, --sensitivity, --greedy)')
        parser.error(f'--data-batches: {free} reads no data, so no batch would be read; give '
                     "--data-config to re-estimate the slim model's batch norms on its "
                     f'batches{other}')
    return args


def runtime_cfg(args: argparse.Namespace, **fields: Any) -> dict:
    """The latency runtime's config dict from --runtime, --quantile, ``fields`` and
    --runtime-options (which win), its keys and dtype checked."""
    from razorlib.pruning.runtimes import check_runtime

    cfg = dict(type=args.runtime, quantile=args.quantile, **fields)
    cfg.update(args.runtime_options or {})
    check_runtime(cfg)
    return cfg


def budget_of(args: argparse.Namespace) -> Tuple[str, float]:
    """The one budget given, ``('ratio', 0.5)`` if none."""
    for key in ('flops', 'params', 'latency', 'ratio'):
        if getattr(args, key) is not None:
            return key, getattr(args, key)
    return '', 0.5


def allocation_name(args: argparse.Namespace) -> str:
    """``'global'``, ``'sensitivity'``, ``'greedy'`` or ``'local'``: how the groups' widths
    are set."""
    return ('global' if args.global_ranking else 'sensitivity' if args.sensitivity
            else 'greedy' if args.greedy else 'local')


def check_mode(args: argparse.Namespace) -> None:
    """Refuse the options of the other mode: CONFIG mode would ignore --model's (and
    prune nothing to their budget), and without CONFIG --subnet & co. would be ignored
    while the default --model is pruned.

    Raises:
        ConfigError: naming every misplaced option.
    """
    from razorlib.engine.config import ConfigError

    if args.config:
        misplaced = [o for o in args.explicit if o in MODEL_ONLY]
        reason = 'for --model only; CONFIG mode keeps the channels of --subnet'
    else:
        misplaced = [o for o in args.explicit if o in CONFIG_ONLY]
        reason = ('for CONFIG mode only (a supernet config, its checkpoint and --subnet); '
                  f'without CONFIG the tool prunes --model {args.model}')
    if misplaced:
        raise ConfigError(f'{", ".join(misplaced)}: {reason}')


def work_dir_of(args: argparse.Namespace) -> Path:
    """--work-dir, or ``work_dirs/prune_<config or model name>``."""
    name = Path(args.config).stem if args.config else args.model
    return Path(args.work_dir or f'work_dirs/prune_{name}')


def data_criteria() -> list:
    """The registered criteria (their short names) that score on data batches."""
    from razorlib.registry import IMPORTANCES

    return sorted(name for name, cls in IMPORTANCES.module_dict.items()
                  if name.islower() and getattr(cls, 'needs_data', False))


def reads_data(args: argparse.Namespace) -> bool:
    """Whether pruning --model runs it on data batches: a data criterion, or an allocation
    measuring the loss."""
    return args.pruner != 'RatioPruner' and bool(
        args.sensitivity or args.greedy or args.criterion.needs_data)


def loss_user(args: argparse.Namespace) -> str:
    """The option that scores --model's channels by the loss of the data batches, so needs
    their targets (``''`` if none does): the other criteria read the inputs only."""
    if args.sensitivity or args.greedy:
        return '--sensitivity' if args.sensitivity else '--greedy'
    return f'--importance {args.importance}' if args.criterion.needs_loss else ''


def data_batches(args: argparse.Namespace) -> list:
    """--model's data batches (:func:`load_batches`; ``[]`` when nothing reads them), read
    before the work dir is made, so that data that cannot give them is refused with
    nothing written.  Read under ``--seed`` with the generators restored after, so that
    the model's initial weights and the example input do not depend on the data."""
    from razorlib.engine.loops.bn_calibration import seeded

    if not (reads_data(args) or args.data_config):
        return []
    with seeded(args.seed):
        return load_batches(args, (3, args.input_size, args.input_size), loss_user(args))


def load_batches(args: argparse.Namespace, size: Tuple[int, ...], needs_targets: str) -> list:
    """``(inputs, targets)`` batches from --data-config's train_dataloader (default: the
    digits train split, test images held out), resized to the example input's size;
    targets are None unless ``needs_targets`` names the option that needs them.

    Raises:
        ConfigError: naming --data-config, its file and the key at fault (the checks of
            :mod:`razorlib.engine.data_check`): the loader cannot be built or read, its
            dataset is empty, a batch lacks ``inputs`` (or the targets ``needs_targets``
            needs), or it gives no batch.
    """
    from razorlib.engine.config import ConfigError
    from razorlib.engine.data_check import batch_labels, read_batches

    where = f'--data-config {args.data_config}' if args.data_config else 'the digits data'
    why = (f'{needs_targets} scores channels by the loss, which needs them (l1, activation, '
           'apoz and wanda read the inputs only)')
    try:
        read = read_batches(data_loader(args), DATA_KEY, args.data_batches)
        return [(resized_inputs(batch, index, size),
                 batch_labels(batch, index, DATA_KEY, why) if needs_targets else None)
                for index, batch in enumerate(read)]
    except ConfigError as err:
        raise ConfigError(f'{where}: {err}') from err


def data_loader(args: argparse.Namespace) -> Iterable:
    """--data-config's train_dataloader (default: the digits train split), checked and
    built by :func:`razorlib.engine.data_check.build_loader`.

    Raises:
        ConfigError: ``<key>: <what is wrong>``.
    """
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner

    from razorlib.engine.config import load_config
    from razorlib.engine.data_check import build_loader
    from razorlib.registry import SCOPE

    init_default_scope(SCOPE)
    if not args.data_config:
        return Runner.build_dataloader(
            dict(batch_size=32, num_workers=0, collate_fn=dict(type='default_collate'),
                 sampler=dict(type='DefaultSampler', shuffle=True, seed=args.seed),
                 dataset=dict(type='DigitsDataset', split='train', test_ratio=0.2,
                              upscale=args.input_size)), seed=args.seed)  # --seed: the order
    cfg = load_config(args.data_config)
    return build_loader(cfg.get(DATA_KEY), DATA_KEY, seed=args.seed)


def resized_inputs(batch: Any, index: int, size: Tuple[int, ...]) -> torch.Tensor:
    """A loader batch's ``inputs`` as a float tensor, resized to ``size``; images of
    several sizes in one batch are each resized."""
    import torch

    from razorlib.engine.data_check import batch_inputs

    inputs = batch_inputs(batch, index, DATA_KEY)
    if isinstance(inputs, (list, tuple)):
        inputs = torch.cat([resize(x[None].float(), size) for x in inputs])
    return resize(inputs.float(), size)


def resize(inputs: torch.Tensor, size: Tuple[int, ...]) -> torch.Tensor:
    """``(N, C, H, W)`` images bilinearly resized to ``size`` ``(C, H, W)``."""
    import torch.nn.functional as F

    if tuple(inputs.shape[1:]) != tuple(size):
        inputs = F.interpolate(inputs, size=size[1:], mode='bilinear', align_corners=False)
    return inputs


def prune_built_in(args: argparse.Namespace, model: nn.Module, batches: list,
                   logger: MMLogger) -> Pruned:
    """A built-in model, masked by a pruner to the budget, its example input, and the
    inputs of the data ``batches`` (:func:`data_batches`; None when there are none)."""
    import numpy as np
    import torch

    from razorlib.registry import PRUNERS

    x = torch.randn(args.batch, 3, args.input_size, args.input_size)
    metric, value = budget_of(args)
    metric = metric or 'ratio'
    if args.pruner == 'RatioPruner':
        cfg = dict(type='RatioPruner', ratios=(value, ))
    else:
        cfg = dict(type=args.pruner, importance=args.criterion,
                   global_ranking=args.global_ranking,
                   sensitivity=dict(greedy=True) if args.greedy else args.sensitivity,
                   round_to=args.round_to, max_ratio=args.max_ratio,
                   runtime=runtime_cfg(args, threads=torch.get_num_threads()),
                   **{metric: value})
    pruner = PRUNERS.build({**cfg, 'except_start_keys': args.except_start_keys})
    needs_data = reads_data(args)
    logger.info(f'{args.model}, input {args.batch}x3x{args.input_size}x{args.input_size}, '
                f'{args.pruner} ({args.importance if args.pruner != "RatioPruner" else "first"} '
                f'channels, {allocation_name(args)}) to {metric} {value:g}'
                + (f'; {len(batches)} data batches' if batches else ''))
    dense = copy.deepcopy(model)
    start = time.perf_counter()
    pruner.prepare_from_supernet(model, x)
    groups = pruner.groups
    logger.info(f'traced in {time.perf_counter() - start:.2f} s: {len(groups.prunable)} prunable '
                f'groups, {len(groups.groups) - len(groups.prunable)} frozen')
    if args.pruner == 'RatioPruner':
        pruner.set_subnet(pruner.sample_subnet())
    else:
        allocation = pruner.allocate(batches if needs_data else None)
        if allocation.latency is not None:
            logger.info(f'latency search on {args.runtime}: measured fractions '
                        + ', '.join(f'{i}: {sum(f) / len(f):.3f}'
                                    for i, f in allocation.latency.measured.items()))
        pruner.set_subnet(allocation.subnet)
    logger.info('kept channels per group:')
    for gid, keep in pruner.current_subnet.items():
        keep = np.asarray(keep, dtype=bool)
        logger.info(f'  {gid}: {int(keep.sum())}/{keep.size}')
    return dense, model, pruner.export_subnet(), x, [inputs for inputs, _ in batches] or None


def load_supernet(args: argparse.Namespace) -> Pruned:
    """The config's supernet with the checkpoint's weights, masked to ``--subnet``, and
    its training inputs (:func:`train_inputs`); all checked before the tool writes
    anything.

    Raises:
        ConfigError: a mistake in the arguments, the config or the subnet file, a model
            ``input_shape`` other than the size of the config's images, or a checkpoint
            that is cut short or not of this supernet (``CheckpointError``).
    """
    from razorlib.algorithms import AutoSlim
    from razorlib.engine.checkpoint_check import check_fits, read_checkpoint, state_dict_of
    from razorlib.engine.config import ConfigError, build_model, check_config, load_config
    from razorlib.engine.data_check import check_config_input_shape
    from razorlib.utils.cli import merge_cfg_options

    if not args.checkpoint or not args.subnet:
        raise ConfigError('CONFIG needs CHECKPOINT and --subnet SUBNET_YAML')
    if not Path(args.subnet).is_file():
        raise ConfigError(f'--subnet: {args.subnet} does not exist')
    cfg = merge_cfg_options(load_config(args.config), args.cfg_options, error=ConfigError)
    check_config(cfg, required=('model', ))
    state = state_dict_of(read_checkpoint(args.checkpoint))
    supernet = build_model(cfg)
    # only AutoSlim's subnets are channel configs of its supernet (--subnet): a pruning
    # algorithm's set_subnet takes its pruner's masks, and its run writes slim.pth itself
    if not isinstance(supernet, AutoSlim):
        raise ConfigError(f'model: CONFIG mode slices an AutoSlim supernet to a searched '
                          f'subnet, got {type(supernet).__name__}; a pruning run (tools/'
                          'train.py) writes its slim.yaml and slim.pth itself, and --model '
                          'prunes a built-in model')
    check_fits(supernet, state, args.checkpoint)
    # the FLOPs logged are counted on a 1 x input_shape batch: refused if the images the
    # subnet was searched (scored) on, else trained on, are of another size
    check_config_input_shape(supernet, cfg, 'val_dataloader' if cfg.get('val_dataloader')
                             else 'train_dataloader',
                             'the FLOPs and params logged for the dense and slim models')
    supernet.load_state_dict(state)
    dense = copy.deepcopy(supernet.architecture).eval()
    try:
        supernet.set_subnet(args.subnet)
    except ValueError as err:
        raise ConfigError(f'--subnet {args.subnet}: {err}') from err
    return dense, supernet.architecture.eval(), supernet.export_subnet(), \
        supernet.example_inputs(), train_inputs(args, cfg, supernet)


def train_inputs(args: argparse.Namespace, cfg: Config,
                 supernet: nn.Module) -> Optional[Iterator[torch.Tensor]]:
    """--recalib-batches preprocessed inputs of the config's train_dataloader (None for
    0), read as the slim model's batch norms take them.

    A supernet's batch norms are shared by all its widths and their statistics fit none
    of them: the search recalibrated each candidate before scoring it, and the slim model
    needs the same, or it scores far below the subnet the search chose.

    Raises:
        ConfigError: the config has no train_dataloader.
    """
    from mmengine.runner import Runner

    from razorlib.engine.config import ConfigError
    from razorlib.engine.loops.bn_calibration import seeded

    if args.recalib_batches == 0:
        return None
    if cfg.get('train_dataloader') is None:
        raise ConfigError('train_dataloader: missing; re-estimating the batch norms of the '
                          'slim model needs it (or --recalib-batches 0)')
    loader = Runner.build_dataloader(cfg.train_dataloader, seed=args.seed)

    def inputs() -> Iterator[torch.Tensor]:
        with seeded(args.seed):  # the same images and augmentations on every run
            for batch in islice(loader, args.recalib_batches):
                yield supernet.data_preprocessor(batch, True)['inputs']

    return inputs()


def check_slim(masked: nn.Module, slim: nn.Module, x: torch.Tensor,
               logger: MMLogger) -> bool:
    """Log whether the slim model gives the masked supernet's outputs and runs."""
    import torch

    with torch.no_grad():
        masked_out, slim_out = masked(x), slim(x)
    scale = float(masked_out.abs().max())
    diff = float((masked_out - slim_out).abs().max())
    same = diff <= 1e-4 * max(scale, 1e-6)
    runs = slim_out.shape == masked_out.shape and bool(torch.isfinite(slim_out).all())
    logger.info(f"check: masked supernet vs slim model max |diff| {diff:.2e} "
                f"(output scale {scale:.2f}): {'OK' if same else 'FAILED'}")
    logger.info(f"check: slim model runs, output {tuple(slim_out.shape)}: "
                f"{'OK' if runs else 'FAILED'}")
    return same and runs


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    import torch
    from mmengine.logging import MMLogger

    from razorlib.engine.checkpoint_check import CheckpointError
    from razorlib.engine.config import ConfigError
    from razorlib.engine.threads import set_threads
    from razorlib.pruning import slim_model
    from razorlib.utils.batch_norm import reestimate_bn_stats
    from razorlib.utils.cli import check_earlier_results, refuse

    torch.manual_seed(args.seed)
    work_dir = work_dir_of(args)
    try:
        check_mode(args)
        check_earlier_results(work_dir, RESULTS, args.overwrite, error=ConfigError)
        loaded = load_supernet(args) if args.config else None
        batches = [] if args.config else data_batches(args)
    except CheckpointError as err:
        return refuse(err)
    except ConfigError as err:
        return refuse(err, args.config or None)
    fresh = not work_dir.exists()
    work_dir.mkdir(parents=True, exist_ok=True)
    logger = MMLogger.get_instance(f'razorlib_prune:{work_dir.resolve()}',
                                   log_file=str(work_dir / 'prune.log'))
    if loaded is not None:
        logger.info(f'{Path(args.config).name} with {args.checkpoint}, subnet {args.subnet}')
        logger.info(f'threads: {set_threads(args.threads, loaded[1])}')
    try:
        dense, masked, cfg, x, calibration = loaded or built_in(args, batches, logger)
    except (ValueError, ConfigError) as err:  # a budget out of reach
        return refused(args, err, work_dir, fresh, logger)
    slim = slim_model(copy.deepcopy(masked), cfg)
    log_costs(args, dense, slim, x, logger)
    ok = check_slim(masked, slim, x, logger)
    if calibration is not None:
        try:
            used = reestimate_bn_stats(slim, calibration)
        except ValueError as err:  # no batches, or batches giving NaN statistics
            return refused(args, err, work_dir, fresh, logger)
        logger.info(f'batch norms of the slim model re-estimated on {used} batches')
    cfg.dump(work_dir / 'channel_cfg.yaml')
    torch.save(slim.state_dict(), work_dir / 'slim.pth')
    logger.info(f"wrote {work_dir / 'channel_cfg.yaml'} and {work_dir / 'slim.pth'}")
    return 0 if ok else 1


def refused(args: argparse.Namespace, err: Exception, work_dir: Path, fresh: bool,
            logger: MMLogger) -> int:
    """Log a mistake found once the work dir exists, remove the work dir if this run made
    it (nothing is left of a refused run), and return exit code 2."""
    logger.error(f'{args.config or args.model}: {err}')
    if fresh:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 2


def built_in(args: argparse.Namespace, batches: list, logger: MMLogger) -> Pruned:
    """--model built (seeded), masked to the budget on ``batches``
    (:func:`prune_built_in`)."""
    from mmengine.registry import init_default_scope

    from razorlib.engine.threads import set_threads
    from razorlib.registry import MODELS, SCOPE

    init_default_scope(SCOPE)
    model = MODELS.build(BUILT_IN[args.model]).eval()
    logger.info(f'threads: {set_threads(args.threads, model)}')
    return prune_built_in(args, model, batches, logger)


def log_costs(args: argparse.Namespace, dense: nn.Module, slim: nn.Module, x: torch.Tensor,
              logger: MMLogger) -> None:
    """Log params, FLOPs and latency (measured on --runtime, dense and slim runs
    interleaved, medians) before and after."""
    import torch

    from razorlib.pruning.runtimes import build_runtime
    from razorlib.utils import get_model_complexity
    from razorlib.utils.complexity import human

    before = get_model_complexity(dense, x)
    after = get_model_complexity(slim, x)
    runtime = build_runtime(runtime_cfg(args, threads=torch.get_num_threads(), repeat=30,
                                        cache_dir=False))
    dense_ms, slim_ms = runtime.latency([copy.deepcopy(dense), copy.deepcopy(slim)], (x, ))
    options = ''.join(f' {k}={v}' for k, v in (args.runtime_options or {}).items())
    logger.info(f"{'':8}{'params':>10}{'FLOPs':>10}{'latency':>12}  ({args.runtime}{options}, "
                f'{runtime.threads} thread(s), quantile {runtime.quantile:g} of '
                f'{runtime.repeat} interleaved runs)')
    logger.info(f"{'dense':8}{human(before.params):>10}{human(before.flops):>10}"
                f"{dense_ms:>9.3f} ms")
    logger.info(f"{'slim':8}{human(after.params):>10}{human(after.flops):>10}"
                f"{slim_ms:>9.3f} ms")
    logger.info(f"{'ratio':8}{after.params / before.params:>10.3f}"
                f"{after.flops / before.flops:>10.3f}{slim_ms / dense_ms:>12.3f}")


if __name__ == '__main__':
    sys.exit(main())
