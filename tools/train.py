"""Train a model from a config with mmengine's Runner, e.g. an AutoSlim supernet.

Examples:
    python tools/train.py configs/pruning/autoslim/autoslim_plaincnn_digits_supernet.py
    python tools/train.py CONFIG --work-dir work_dirs/run1 --cfg-options train_cfg.max_epochs=5
    python tools/train.py CONFIG --resume                  # the last checkpoint in work_dir
    python tools/train.py CONFIG --resume work_dirs/run1/epoch_2.pth
    torchrun --nproc_per_node 2 tools/train.py CONFIG --launcher pytorch   # DDP; gloo on CPU

A config mistake, a checkpoint that is cut short or of another model: one line, exit
code 2.  See docs/tools/train.md.
"""
import argparse
import logging
import os
import runpy
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

# Only what the arguments need is imported here (no torch), so that --help is instant.
from mmengine.config import Config, DictAction
from mmengine.logging import print_log

#: What ``torchrun`` sets for each process, and ``--launcher pytorch`` reads: the process
#: group's ``env://`` rendezvous (and mmengine, on CUDA, the local rank).
TORCHRUN_ENV = ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')
#: razorlib.utils.cli, run from its file beside this folder: ``import razorlib`` loads
#: torch, which --help must not wait for.
at_least = runpy.run_path(str(Path(__file__).resolve().parents[1] / 'razorlib' / 'utils'
                              / 'cli.py'))['at_least']


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='the config file')
    parser.add_argument('--work-dir', help="where logs and checkpoints go (default: the "
                        "config's work_dir, else work_dirs/<config name>)")
    parser.add_argument('--resume', nargs='?', const='auto', metavar='CKPT',
                        help='resume from CKPT, or, without CKPT, from the last checkpoint '
                        'in the work dir (default: start afresh, or from load_from)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys, e.g. train_cfg.max_epochs=5 (default: none)')
    parser.add_argument('--launcher', choices=['none', 'pytorch'], default='none',
                        help="'pytorch' under torchrun for distributed training "
                        '(default: %(default)s)')
    parser.add_argument('--threads', type=at_least(1), metavar='N',
                        help='torch threads (default: 1 for a model under 1M parameters, '
                        'else the idle cores; OMP_NUM_THREADS if set)')
    args = parser.parse_args(argv)
    missing = [name for name in TORCHRUN_ENV if name not in os.environ]
    if args.launcher == 'pytorch' and missing:  # else a traceback from the process group
        parser.error(f'--launcher pytorch: {", ".join(missing)} not set, as torchrun sets '
                     'them; start the tool as `torchrun --nproc_per_node N tools/train.py '
                     'CONFIG --launcher pytorch`, or leave --launcher out to train in this '
                     'process')
    return args


def checked_config(args: argparse.Namespace) -> Config:
    """The config with ``--cfg-options`` merged and checked before the Runner makes the work
    dir: the model is built here, as the Runner will build it, so that a value its
    constructors refuse stops the run at once, and the checkpoint the Runner will read is
    read (a cut-short one) and fitted to it.

    Raises:
        ConfigError: a config mistake, a ``--cfg-options`` key it does not have, a value
            the model's constructors refuse, or a model ``input_shape`` other than the
            size of the training images (read off one batch of the train_dataloader,
            built for the check).
        CheckpointError: a checkpoint missing, cut short or of another model.
    """
    from mmengine.runner.checkpoint import find_latest_checkpoint

    from razorlib.engine.checkpoint_check import check_fits, read_checkpoint, state_dict_of
    from razorlib.engine.config import (TRAIN_KEYS, ConfigError, build_model, check_config,
                                        load_config, set_work_dir)
    from razorlib.engine.data_check import check_config_input_shape
    from razorlib.utils.cli import merge_cfg_options

    cfg = merge_cfg_options(load_config(args.config), args.cfg_options, error=ConfigError)
    check_config(cfg, TRAIN_KEYS)
    model = build_model(cfg)
    set_work_dir(cfg, args.config, args.work_dir)
    resume = args.resume
    if resume is None and cfg.get('resume'):
        # resume=True in the config (or --cfg-options) resumes as --resume does: from
        # load_from, else the work dir's last checkpoint, which must fit the model whole
        # (mmengine's resume loads with strict=False: a head of another class count
        # would be left at its initial weights)
        resume = cfg.get('load_from') or 'auto'
    if resume == 'auto':  # the last checkpoint in work_dir; none: a first run, as configured
        resume = find_latest_checkpoint(cfg.work_dir)
        if resume is None:
            option = '--resume' if args.resume else 'resume=True'
            print_log(f'{option}: no checkpoint in {cfg.work_dir} to resume; this run starts '
                      f'from {cfg.get("load_from") or "the initial weights"}', logger='current',
                      level=logging.WARNING)
    if resume is not None:
        cfg.resume, cfg.load_from = True, resume
    # the checkpoint the Runner will read (a URL is mmengine's to download and check)
    path = cfg.get('load_from')
    if path and '://' not in str(path):
        # resuming needs the same model; load_from may leave out parts (a new head)
        check_fits(model, state_dict_of(read_checkpoint(path)), path, partial=resume is None)
    for key, module, init in pretrained_inits(cfg.model, model):
        # mmengine's PretrainedInit loads with strict=False: a wrong file would load nothing
        checkpoint = init['checkpoint']
        if '://' in str(checkpoint):
            continue
        if not Path(checkpoint).is_file():
            raise ConfigError(f'{key}.init_cfg.checkpoint: {checkpoint} does not exist')
        state = state_dict_of(read_checkpoint(checkpoint))
        prefix = init.get('prefix')
        if prefix:
            state = {name[len(prefix) + 1:]: value for name, value in state.items()
                     if name.startswith(f'{prefix}.')}
        check_fits(module, state, checkpoint, partial=True)
    # a FLOPs or params target and the flops_M / params_M logged are counted on a 1 x
    # input_shape batch: refused if the training images are of another size
    check_config_input_shape(model, cfg, 'train_dataloader', 'the FLOPs and params its '
                             'FLOPs/params targets prune to and ResourceEstimatorHook logs')
    return cfg


def pretrained_inits(model_cfg, model) -> List[Tuple[str, Any, dict]]:
    """``(config key, built module, init_cfg)`` of every ``init_cfg=dict(type='Pretrained',
    checkpoint=...)`` in the model's config (the ImageNet pruning configs give their
    architecture's weights so), each with the module it initialises (``model`` followed
    down the config's keys; those the built model has no attribute for are not checked)."""
    from torch import nn

    found = []

    def walk(cfg, key, module):
        if not isinstance(cfg, dict):
            return
        inits = cfg.get('init_cfg')
        for init in inits if isinstance(inits, (list, tuple)) else [inits]:
            if isinstance(init, dict) and init.get('type') == 'Pretrained' \
                    and init.get('checkpoint') and module is not None:
                found.append((key, module, init))
        for name, value in cfg.items():
            if name != 'init_cfg':
                walk(value, f'{key}.{name}', getattr(module, name, None)
                     if isinstance(module, nn.Module) else None)

    walk(model_cfg, 'model', model)
    return found


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    from razorlib.engine.checkpoint_check import CheckpointError
    from razorlib.engine.config import ConfigError
    from razorlib.engine.distributed import distributed_run
    from razorlib.utils.cli import refuse

    try:
        cfg = checked_config(args)
    except CheckpointError as err:
        return refuse(err)
    except ConfigError as err:
        return refuse(err, args.config)
    cfg.launcher = args.launcher
    # the Runner lives in run_training only: under torchrun its DDP model, which holds the
    # gloo group, is released before distributed_run destroys the group
    with distributed_run(cfg) if args.launcher != 'none' else nullcontext():
        return run_training(cfg, args)


def run_training(cfg: Config, args: argparse.Namespace) -> int:
    """Build the Runner, set its threads, train; the exit code."""
    from razorlib.engine.config import ConfigError
    from razorlib.engine.threads import set_threads
    from razorlib.engine.utils import build_runner, unwrap
    from razorlib.utils.cli import refuse

    runner = build_runner(cfg)
    try:
        runner.logger.info(f'threads: {set_threads(args.threads, unwrap(runner.model))}')
    except ConfigError as err:
        return refuse(err)
    runner.train()
    return 0


if __name__ == '__main__':
    sys.exit(main())
