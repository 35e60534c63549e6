"""Prune a model, check the slim model and save it with its channel config.

Two modes:

    # a trained supernet (an AutoSlim config + its checkpoint) sliced to a searched subnet
    python tools/prune.py CONFIG CHECKPOINT --subnet SUBNET_YAML [--work-dir DIR]
    # a built-in model, pruned with a pruner at one ratio
    python tools/prune.py --model resnet50 --ratio 0.5 --work-dir work_dirs/prune_resnet50

Both log parameters and FLOPs before and after, check that the masked supernet and the
sliced model give the same outputs, and write ``channel_cfg.yaml`` and ``slim.pth`` (the
slim model's state_dict).  Rebuild the slim model without the supernet and its pruner::

    model = MODELS.build(architecture_cfg)   # cfg.model.architecture, or the built-in model
    slim_model(model, 'channel_cfg.yaml').load_state_dict(torch.load('slim.pth'))

See docs/tools/prune.md.
"""
import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Tuple

import torch
import torch.nn as nn
from mmengine.config import DictAction
from mmengine.logging import MMLogger
from mmengine.registry import init_default_scope
from mmengine.runner import load_checkpoint

from razorlib.engine.config import ConfigError, check_config, load_config
from razorlib.models import MobileNetV2, PlainCNN, ResNet, ShuffleNetV2
from razorlib.pruning import ChannelConfig, slim_model
from razorlib.registry import MODELS, PRUNERS, SCOPE
from razorlib.utils import get_model_complexity
from razorlib.utils.complexity import human

BUILT_IN = {
    **{f'resnet{d}': (lambda d=d: ResNet(depth=d, num_classes=1000))
       for d in (18, 34, 50, 101, 152)},
    'mobilenet_v2': lambda: MobileNetV2(num_classes=1000),
    'shufflenet_v2': lambda: ShuffleNetV2(num_classes=1000),
    'plain_cnn': lambda: PlainCNN(num_classes=10),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Prune a model and check the result.')
    parser.add_argument('config', nargs='?', help='a supernet (AutoSlim) config')
    parser.add_argument('checkpoint', nargs='?', help="the supernet's checkpoint")
    parser.add_argument('--subnet', help='the subnet channel config (YAML/JSON) to keep')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys')
    parser.add_argument('--model', default='resnet50', choices=sorted(BUILT_IN),
                        help='built-in model to prune (without CONFIG)')
    parser.add_argument('--pruner', default='L1NormPruner', choices=['L1NormPruner', 'RatioPruner'])
    parser.add_argument('--ratio', type=float, default=0.5, help='fraction of channels to keep')
    parser.add_argument('--input-size', type=int, default=224)
    parser.add_argument('--except-start-keys', nargs='*', default=[],
                        help='module-name prefixes whose output channels stay')
    parser.add_argument('--work-dir', default=None,
                        help='default: work_dirs/prune_<model or config name>')
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args(argv)


def prune_built_in(args, logger: MMLogger
                   ) -> Tuple[nn.Module, nn.Module, ChannelConfig, torch.Tensor]:
    """A built-in model, masked by a pruner at ``--ratio``, and its example input."""
    model = BUILT_IN[args.model]().eval()
    x = torch.randn(1, 3, args.input_size, args.input_size)
    ratio_key = 'ratio' if args.pruner == 'L1NormPruner' else 'ratios'
    ratio = args.ratio if args.pruner == 'L1NormPruner' else (args.ratio, )
    pruner = PRUNERS.build({'type': args.pruner, ratio_key: ratio,
                            'except_start_keys': args.except_start_keys})
    logger.info(f'{args.model}, input 1x3x{args.input_size}x{args.input_size}, '
                f'{args.pruner} keeping {args.ratio:.0%} of each group')
    dense = copy.deepcopy(model)
    start = time.perf_counter()
    pruner.prepare_from_supernet(model, x)
    groups = pruner.groups
    logger.info(f'traced in {time.perf_counter() - start:.2f} s: {len(groups.prunable)} prunable '
                f'groups, {len(groups.groups) - len(groups.prunable)} frozen')
    pruner.set_subnet(pruner.sample_subnet())
    return dense, model, pruner.export_subnet(), x


def load_supernet(args, logger: MMLogger) -> Tuple[nn.Module, nn.Module, ChannelConfig,
                                                   torch.Tensor]:
    """The config's supernet with the checkpoint's weights, masked to ``--subnet``.

    Raises:
        ConfigError: a mistake in the arguments, the config or the subnet file.
    """
    if not args.checkpoint or not args.subnet:
        raise ConfigError('CONFIG needs CHECKPOINT and --subnet SUBNET_YAML')
    for what, path in (('checkpoint', args.checkpoint), ('--subnet', args.subnet)):
        if not Path(path).is_file():
            raise ConfigError(f'{what}: {path} does not exist')
    cfg = load_config(args.config, args.cfg_options)
    check_config(cfg, required=('model', ))
    init_default_scope(cfg.get('default_scope') or SCOPE)
    supernet = MODELS.build(cfg.model)
    if not hasattr(supernet, 'architecture') or not hasattr(supernet, 'set_subnet'):
        raise ConfigError(f'model: a supernet with an architecture and subnets (AutoSlim) '
                          f'is needed, got {type(supernet).__name__}')
    load_checkpoint(supernet, args.checkpoint, map_location='cpu', strict=True,
                    logger=logger.instance_name)
    dense = copy.deepcopy(supernet.architecture).eval()
    try:
        supernet.set_subnet(args.subnet)
    except ValueError as err:
        raise ConfigError(f'--subnet {args.subnet}: {err}') from err
    logger.info(f'{Path(args.config).name} with {args.checkpoint}, subnet {args.subnet}')
    return dense, supernet.architecture.eval(), supernet.export_subnet(), \
        supernet.example_inputs()


def check_slim(masked: nn.Module, slim: nn.Module, x: torch.Tensor,
               logger: MMLogger) -> bool:
    """Log whether the slim model gives the masked supernet's outputs and runs."""
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


def main(argv=None) -> int:
    args = parse_args(argv)
    name = Path(args.config).stem if args.config else args.model
    work_dir = Path(args.work_dir or f'work_dirs/prune_{name}')
    work_dir.mkdir(parents=True, exist_ok=True)
    logger = MMLogger.get_instance(f'razorlib_prune:{work_dir.resolve()}',
                                   log_file=str(work_dir / 'prune.log'))
    torch.manual_seed(args.seed)
    try:
        dense, masked, cfg, x = (load_supernet if args.config else prune_built_in)(args, logger)
    except ConfigError as err:
        logger.error(f'{args.config or args.model}: {err}')
        return 2
    slim = slim_model(copy.deepcopy(masked), cfg)
    before = get_model_complexity(dense, x)
    after = get_model_complexity(slim, x)
    logger.info(f"{'':8}{'params':>10}{'FLOPs':>10}")
    logger.info(f"{'dense':8}{human(before.params):>10}{human(before.flops):>10}")
    logger.info(f"{'slim':8}{human(after.params):>10}{human(after.flops):>10}")
    logger.info(f"{'ratio':8}{after.params / before.params:>10.3f}"
                f"{after.flops / before.flops:>10.3f}")
    ok = check_slim(masked, slim, x, logger)
    cfg.dump(work_dir / 'channel_cfg.yaml')
    torch.save(slim.state_dict(), work_dir / 'slim.pth')
    logger.info(f"wrote {work_dir / 'channel_cfg.yaml'} and {work_dir / 'slim.pth'}")
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
