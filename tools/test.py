"""Evaluate a checkpoint on a config's test set with mmengine's Runner.

Examples:
    python tools/test.py configs/pruning/autoslim/autoslim_plaincnn_digits_supernet.py \\
        work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth
    python tools/test.py configs/pruning/autoslim/autoslim_plaincnn_digits_subnet_retrain.py \\
        work_dirs/half/slim.pth --cfg-options model.channel_cfg=work_dirs/half/channel_cfg.yaml

An AutoSlim supernet is evaluated at its max subnet.  A checkpoint that is cut short or
not of the config's model (other keys or shapes), a config mistake or a ``--cfg-options``
key the config does not have is refused in one line, exit code 2, before the work dir
is made.  See docs/tools/test.md.
"""
import argparse
import runpy
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

# Only what the arguments need is imported here (no torch), so that --help is instant.
from mmengine.config import DictAction
from mmengine.logging import print_log

if TYPE_CHECKING:
    from mmengine.config import Config

#: razorlib.utils.cli, run from its file beside this folder: ``import razorlib`` loads
#: torch, which --help must not wait for.
at_least = runpy.run_path(str(Path(__file__).resolve().parents[1] / 'razorlib' / 'utils'
                              / 'cli.py'))['at_least']


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
    parser.add_argument('--threads', type=at_least(1), metavar='N',
                        help='torch threads (default: 1 for a model under 1M parameters, '
                        'else the idle cores; OMP_NUM_THREADS if set)')
    return parser.parse_args(argv)


def checked_config(args: argparse.Namespace) -> 'Config':
    """The config with ``--cfg-options`` merged, checked with the checkpoint before the
    Runner makes the work dir: the checkpoint is read, fitted to the model built here
    from the config, as the Runner will build it, and loaded into it.

    Raises:
        ConfigError: a config mistake, a ``--cfg-options`` key it does not have, a value
            the model's constructors refuse, or a model ``input_shape`` other than the
            size of the test images (read off one batch of the test_dataloader).
        CheckpointError: a checkpoint missing, cut short or of another model.
    """
    from razorlib.engine.checkpoint_check import (check_fits, check_loads, read_checkpoint,
                                                  state_dict_of)
    from razorlib.engine.config import (TEST_KEYS, ConfigError, build_model, check_config,
                                        load_config)
    from razorlib.engine.data_check import check_config_input_shape
    from razorlib.utils.cli import merge_cfg_options

    cfg = merge_cfg_options(load_config(args.config), args.cfg_options, error=ConfigError)
    check_config(cfg, TEST_KEYS)
    state = state_dict_of(read_checkpoint(args.checkpoint))
    model = build_model(cfg)
    check_fits(model, state, args.checkpoint)
    check_loads(model, state, args.checkpoint)
    # the flops_M / params_M ResourceEstimatorHook logs beside the test metrics are
    # counted on a 1 x input_shape batch: refused if the test images are of another size
    check_config_input_shape(model, cfg, 'test_dataloader',
                             'the FLOPs and params ResourceEstimatorHook logs')
    return cfg


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    from razorlib.engine.checkpoint_check import CheckpointError
    from razorlib.engine.config import ConfigError, set_work_dir
    from razorlib.engine.threads import set_threads
    from razorlib.engine.utils import build_runner, unwrap
    from razorlib.utils.cli import refuse

    try:
        cfg = checked_config(args)
    except CheckpointError as err:
        return refuse(err)
    except ConfigError as err:
        return refuse(err, args.config)
    set_work_dir(cfg, args.config, args.work_dir)
    cfg.load_from = args.checkpoint
    cfg.resume = False
    runner = build_runner(cfg)
    runner.logger.info(f'threads: {set_threads(args.threads, unwrap(runner.model))}')
    metrics = runner.test()
    print_log(f'test metrics: {metrics}', logger='current')
    return 0


if __name__ == '__main__':
    sys.exit(main())
