"""Train a model with mmengine's Runner, e.g. an AutoSlim supernet.

    python tools/train.py configs/pruning/autoslim/autoslim_plaincnn_digits_supernet.py
    python tools/train.py CONFIG --work-dir work_dirs/run1 --cfg-options train_cfg.max_epochs=5
    python tools/train.py CONFIG --resume                  # the last checkpoint in work_dir
    python tools/train.py CONFIG --resume work_dirs/run1/epoch_2.pth
    torchrun --nproc_per_node 2 tools/train.py CONFIG --launcher pytorch   # DDP; gloo on CPU

See docs/tools/train.md.
"""
import argparse
import logging
import sys

from mmengine.config import DictAction
from mmengine.logging import print_log
from mmengine.runner import Runner

from razorlib.engine.config import (TRAIN_KEYS, ConfigError, check_config, load_config,
                                    set_work_dir)
from razorlib.engine.distributed import prepare_cpu_distributed


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train a model from a config.')
    parser.add_argument('config', help='the config file')
    parser.add_argument('--work-dir', help='where logs and checkpoints go; default the '
                        "config's work_dir, else work_dirs/<config name>")
    parser.add_argument('--resume', nargs='?', const='auto', metavar='CKPT',
                        help='resume from CKPT, or, without CKPT, from the last checkpoint '
                        'in the work dir')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys, e.g. train_cfg.max_epochs=5')
    parser.add_argument('--launcher', choices=['none', 'pytorch'], default='none',
                        help="'pytorch' under torchrun for distributed training")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options)
        check_config(cfg, TRAIN_KEYS)
    except ConfigError as err:
        print_log(f'{args.config}: {err}', logger='current', level=logging.ERROR)
        return 2
    set_work_dir(cfg, args.config, args.work_dir)
    if args.resume is not None:
        cfg.resume = True
        cfg.load_from = None if args.resume == 'auto' else args.resume
    cfg.launcher = args.launcher
    if args.launcher != 'none':
        prepare_cpu_distributed(cfg)
    runner = Runner.from_cfg(cfg)
    runner.train()
    return 0


if __name__ == '__main__':
    sys.exit(main())
