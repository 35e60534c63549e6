"""Evaluate a checkpoint on a config's test set with mmengine's Runner.

    python tools/test.py configs/pruning/autoslim/autoslim_plaincnn_digits_supernet.py \
        work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth

An AutoSlim supernet is evaluated at its max subnet.  See docs/tools/test.md.
"""
import argparse
import logging
import sys
from pathlib import Path

from mmengine.config import DictAction
from mmengine.logging import print_log
from mmengine.runner import Runner

from razorlib.engine.config import (TEST_KEYS, ConfigError, check_config, load_config,
                                    set_work_dir)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Test a checkpoint.')
    parser.add_argument('config', help='the config file')
    parser.add_argument('checkpoint', help='the checkpoint (or a plain state_dict) to test')
    parser.add_argument('--work-dir', help='where the log goes; default the '
                        "config's work_dir, else work_dirs/<config name>")
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys, e.g. test_dataloader.batch_size=64')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options)
        check_config(cfg, TEST_KEYS)
        if not Path(args.checkpoint).is_file():
            raise ConfigError(f'checkpoint: {args.checkpoint} does not exist')
    except ConfigError as err:
        print_log(f'{args.config}: {err}', logger='current', level=logging.ERROR)
        return 2
    set_work_dir(cfg, args.config, args.work_dir)
    cfg.load_from = args.checkpoint
    cfg.resume = False
    runner = Runner.from_cfg(cfg)
    metrics = runner.test()
    print_log(f'test metrics: {metrics}', logger='current')
    return 0


if __name__ == '__main__':
    sys.exit(main())
