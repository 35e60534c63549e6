"""Evaluate a checkpoint on a config's test set with mmengine's Runner.

Examples:
    python tools/test.py configs/pruning/autoslim/autoslim_plaincnn_digits_supernet.py \\
        work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth
    python tools/test.py configs/pruning/autoslim/autoslim_plaincnn_digits_subnet_retrain.py \\
        work_dirs/half/slim.pth --cfg-options model.channel_cfg=work_dirs/half/channel_cfg.yaml

An AutoSlim supernet is evaluated at its max subnet.  A checkpoint that is cut short or
not of the config's model (other keys or shapes) is refused in one line, exit code 2.
See docs/tools/test.md.
"""
import argparse
import logging
import sys
from typing import Optional, Sequence

# Only what the arguments need is imported here (no torch), so that --help is instant.
from mmengine.config import DictAction
from mmengine.logging import print_log


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='the config file')
    parser.add_argument('checkpoint', help='the checkpoint (or a plain state_dict) to test')
    parser.add_argument('--work-dir', help="where the log goes (default: the config's "
                        'work_dir, else work_dirs/<config name>)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys, e.g. test_dataloader.batch_size=64 '
                        '(default: none)')
    parser.add_argument('--threads', type=int, metavar='N',
                        help='torch threads (default: 1 for a model under 1M parameters, '
                        'else the idle cores; OMP_NUM_THREADS if set)')
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        parser.error(f'--threads: at least 1, got {args.threads}')
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    from mmengine.runner import Runner

    from razorlib.engine.checkpoint_check import (CheckpointError, check_fits,
                                                  read_checkpoint, state_dict_of)
    from razorlib.engine.config import (TEST_KEYS, ConfigError, check_config, load_config,
                                        set_work_dir)
    from razorlib.engine.threads import set_threads
    from razorlib.engine.utils import unwrap

    try:
        cfg = load_config(args.config, args.cfg_options)
        check_config(cfg, TEST_KEYS)
        checkpoint = read_checkpoint(args.checkpoint)  # before the Runner makes the work dir
    except CheckpointError as err:
        print_log(str(err), logger='current', level=logging.ERROR)
        return 2
    except ConfigError as err:
        print_log(f'{args.config}: {err}', logger='current', level=logging.ERROR)
        return 2
    set_work_dir(cfg, args.config, args.work_dir)
    cfg.load_from = args.checkpoint
    cfg.resume = False
    runner = Runner.from_cfg(cfg)
    model = unwrap(runner.model)
    try:
        runner.logger.info(f'threads: {set_threads(args.threads, model)}')
        check_fits(model, state_dict_of(checkpoint), args.checkpoint)
    except ConfigError as err:
        print_log(str(err), logger='current', level=logging.ERROR)
        return 2
    metrics = runner.test()
    print_log(f'test metrics: {metrics}', logger='current')
    return 0


if __name__ == '__main__':
    sys.exit(main())
