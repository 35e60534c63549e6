"""Prune a built-in model: trace, pick channels, slim, check, save.

    python tools/prune.py --model resnet50 --ratio 0.5 --work-dir work_dirs/prune_resnet50

Prints parameters and FLOPs before and after, checks that the masked supernet and the
sliced model give the same outputs and that the slim model runs, and writes the channel
config (YAML) and the slim model's state_dict.  Rebuild the slim model anywhere with::

    model = MODELS.build(dict(type='ResNet', depth=50, num_classes=1000))
    slim_model(model, 'channel_cfg.yaml').load_state_dict(torch.load('slim.pth'))
"""
import argparse
import copy
import sys
import time
from pathlib import Path

import torch
from mmengine.logging import MMLogger

from razorlib.models import MobileNetV2, PlainCNN, ResNet, ShuffleNetV2
from razorlib.registry import PRUNERS
from razorlib.utils import get_model_complexity
from razorlib.utils.complexity import human

BUILT_IN = {
    **{f'resnet{d}': (lambda d=d: ResNet(depth=d, num_classes=1000)) for d in (18, 34, 50, 101, 152)},
    'mobilenet_v2': lambda: MobileNetV2(num_classes=1000),
    'shufflenet_v2': lambda: ShuffleNetV2(num_classes=1000),
    'plain_cnn': lambda: PlainCNN(num_classes=10),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Prune a built-in model and check the result.')
    parser.add_argument('--model', default='resnet50', choices=sorted(BUILT_IN))
    parser.add_argument('--pruner', default='L1NormPruner', choices=['L1NormPruner', 'RatioPruner'])
    parser.add_argument('--ratio', type=float, default=0.5, help='fraction of channels to keep')
    parser.add_argument('--input-size', type=int, default=224)
    parser.add_argument('--except-start-keys', nargs='*', default=[],
                        help='module-name prefixes whose output channels stay')
    parser.add_argument('--work-dir', default=None, help='default: work_dirs/prune_<model>')
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    work_dir = Path(args.work_dir or f'work_dirs/prune_{args.model}')
    work_dir.mkdir(parents=True, exist_ok=True)
    logger = MMLogger.get_instance('razorlib_prune', log_file=str(work_dir / 'prune.log'))
    torch.manual_seed(args.seed)
    model = BUILT_IN[args.model]().eval()
    x = torch.randn(1, 3, args.input_size, args.input_size)
    ratio_key = 'ratio' if args.pruner == 'L1NormPruner' else 'ratios'
    ratio = args.ratio if args.pruner == 'L1NormPruner' else (args.ratio, )
    pruner = PRUNERS.build({'type': args.pruner, ratio_key: ratio,
                            'except_start_keys': args.except_start_keys})
    logger.info(f'{args.model}, input 1x3x{args.input_size}x{args.input_size}, '
                f'{args.pruner} keeping {args.ratio:.0%} of each group')

    dense = get_model_complexity(model, x)
    with torch.no_grad():
        dense_out = model(x)
    start = time.perf_counter()
    pruner.prepare_from_supernet(model, x)
    groups = pruner.groups
    logger.info(f'traced in {time.perf_counter() - start:.2f} s: {len(groups.prunable)} prunable '
                f'groups, {len(groups.groups) - len(groups.prunable)} frozen')
    pruner.set_subnet(pruner.sample_subnet())
    with torch.no_grad():
        masked_out = model(x)
    cfg = pruner.export_subnet()
    slim = pruner.deploy_subnet(copy.deepcopy(model), cfg)
    with torch.no_grad():
        slim_out = slim(x)
    small = get_model_complexity(slim, x)

    logger.info(f"{'':8}{'params':>10}{'FLOPs':>10}")
    logger.info(f"{'dense':8}{human(dense.params):>10}{human(dense.flops):>10}")
    logger.info(f"{'slim':8}{human(small.params):>10}{human(small.flops):>10}")
    logger.info(f"{'ratio':8}{small.params / dense.params:>10.3f}{small.flops / dense.flops:>10.3f}")

    scale = float(masked_out.abs().max())
    diff = float((masked_out - slim_out).abs().max())
    same = diff <= 1e-4 * max(scale, 1e-6)
    runs = slim_out.shape == dense_out.shape and bool(torch.isfinite(slim_out).all())
    logger.info(f"check: masked supernet vs slim model max |diff| {diff:.2e} "
                f"(output scale {scale:.2f}): {'OK' if same else 'FAILED'}")
    logger.info(f"check: slim model runs, output {tuple(slim_out.shape)}: "
                f"{'OK' if runs else 'FAILED'}")
    cfg.dump(work_dir / 'channel_cfg.yaml')
    torch.save(slim.state_dict(), work_dir / 'slim.pth')
    logger.info(f"wrote {work_dir / 'channel_cfg.yaml'} and {work_dir / 'slim.pth'}")
    return 0 if same and runs else 1


if __name__ == '__main__':
    sys.exit(main())
