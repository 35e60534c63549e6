"""Count the FLOPs and parameters of a config's model.

Examples:
    python tools/get_flops.py configs/pruning/autoslim/autoslim_plaincnn_digits_supernet.py
    python tools/get_flops.py CONFIG --subnet work_dirs/.../subnet_best.yaml
    python tools/get_flops.py CONFIG --shape 3 224 224

For a supernet it reports the max and the min subnet, and with ``--subnet`` that subnet
(an AutoSlim channel config, or a NAS supernet's subnet YAML; a NAS supernet's (SPOS,
DARTS) max is each mutable's last choice, its min the subnet of fewest FLOPs, counted on
the fixed network as the search counts them); for any other model the model as built, or sliced
to ``--subnet``: of an algorithm, its ``architecture`` (a pruning algorithm's network, a
distillation's student, a QAT's FP32 network).  The
input is ``--shape`` (``C H W``, ``H W`` or one size), else the supernet's
``input_shape``, else 3x224x224.  See docs/tools/get_flops.md.
"""
from __future__ import annotations

import argparse
import runpy
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Sequence, Tuple

# Only what the arguments need is imported here (no torch), so that --help is instant.
from mmengine.config import DictAction
from mmengine.logging import print_log

if TYPE_CHECKING:
    import torch

    from razorlib.utils import Complexity

#: razorlib.utils.cli, run from its file beside this folder: ``import razorlib`` loads
#: torch, which --help must not wait for.
at_least = runpy.run_path(str(Path(__file__).resolve().parents[1] / 'razorlib' / 'utils'
                              / 'cli.py'))['at_least']


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='the config file')
    parser.add_argument('--shape', type=at_least(1), nargs='+', metavar='N',
                        help="input C H W, H W, or one size (square, 3 channels) (default: "
                        "the supernet's input_shape, else 3 224 224)")
    parser.add_argument('--subnet', help='also count this subnet channel config (YAML/JSON) '
                        '(default: none)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys (default: none)')
    parser.add_argument('--threads', type=at_least(1), metavar='N',
                        help='torch threads (default: 1 for a model under 1M parameters, '
                        'else the idle cores; OMP_NUM_THREADS if set)')
    return parser.parse_args(argv)


def input_shape(shape: List[int], model: torch.nn.Module) -> Tuple[int, ...]:
    """``(C, H, W)`` from ``--shape``, the model's ``input_shape`` or 3x224x224."""
    from razorlib.engine.config import ConfigError

    if not shape:
        return tuple(getattr(model, 'input_shape', (3, 224, 224)))
    if len(shape) > 3:
        raise ConfigError(f'--shape: expected C H W, H W or one size, got {shape}')
    return tuple([3] * (3 - len(shape)) + shape) if len(shape) > 1 else (3, shape[0], shape[0])


def counted_config(cfg) -> Any:
    """The part of ``cfg`` whose model is counted: a QAT's FP32 architecture (its
    quantized graph holds no modules to count, and building it calibrates), else the
    whole model."""
    from mmengine.config import Config

    model = cfg.model
    if model.get('type') == 'QAT' and isinstance(model.get('architecture'), dict):
        return Config(dict(cfg, model=model.architecture))
    return cfg


def counted_module(model: torch.nn.Module) -> torch.nn.Module:
    """What the FLOPs and parameters are of: an algorithm's ``architecture`` (the
    network a pruning algorithm prunes, the student of a distillation: not its teacher
    or its connectors), the model itself otherwise."""
    from torch import nn

    architecture = getattr(model, 'architecture', None)
    return architecture if isinstance(architecture, nn.Module) else model


class InputError(ValueError):
    """A forward that failed on the counted input: a model that takes another input
    (channels, size) than ``--shape``, or a ``--subnet`` that slices the model so that a
    layer gets another channel count than it keeps."""


@contextmanager
def running_modules(model: torch.nn.Module) -> Iterator[List[str]]:
    """The modules of ``model`` whose forward is running (name and type), innermost last:
    when a forward raises, the last one is the module at fault, which the op's own error
    (a channel-count mismatch) does not name."""
    running: List[str] = []

    def enter(name: str):
        return lambda module, args: running.append(name)

    def leave(name: str):
        def hook(module, args, output):
            while running.pop() != name:  # an inner failure its caller recovered from
                pass
        return hook

    handles = []
    for name, module in model.named_modules():
        label = f'{name} ({type(module).__name__})' if name else type(module).__name__
        # first, so that a pre-hook that refuses the input (a mask) is inside the module
        handles.append(module.register_forward_pre_hook(enter(label), prepend=True))
        handles.append(module.register_forward_hook(leave(label)))
    try:
        yield running
    finally:
        for handle in handles:
            handle.remove()


def complexity(model: torch.nn.Module, inputs: torch.Tensor) -> Complexity:
    """``get_model_complexity(model, inputs)``.

    Raises:
        InputError: naming the module whose forward failed, the input and the op's error.
    """
    from razorlib.pruning.masks import MaskedInputError
    from razorlib.utils import first_line, get_model_complexity

    with running_modules(model) as running:
        try:
            return get_model_complexity(model, inputs)
        except (RuntimeError, ValueError) as err:
            where = running[-1] if running else type(model).__name__
            # a mask refuses the input in its layer's pre-hook, inside that layer (``where``),
            # and its message names the layer too: said once
            detail = (err.detail if isinstance(err, MaskedInputError)
                      else first_line(err, limit=None, with_type=False))
            raise InputError(f"{where} fails on input {'x'.join(map(str, inputs.shape))}: "
                             f'{detail}') from err


def is_nas(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a NAS supernet (SPOS, DARTS): it has a ``search_space`` of
    op and value choices, and no max/min channel widths of its own."""
    return getattr(model, 'search_space', None) is not None


def subnet_complexity(model: torch.nn.Module, subnet: Any, inputs: torch.Tensor) -> Complexity:
    """``subnet`` of ``model`` counted: a NAS supernet's choice dict or file on its fixed
    network (the candidates the subnet does not run are not counted, as in the
    search); an AutoSlim supernet set to its channel config; any other model sliced to
    it.

    Raises:
        ValueError: naming the file and the key that does not fit the model.
        InputError: naming the module of the subnet that cannot take its input (a channel
            config that slices a layer's output, not the next layer's input).
    """
    from razorlib.nas import fix_subnet
    from razorlib.pruning import slim_model

    if is_nas(model):
        return complexity(fix_subnet(model.architecture, subnet), inputs)
    if hasattr(model, 'set_max_subnet'):  # an AutoSlim supernet
        model.set_subnet(subnet)
        return complexity(model, inputs)
    counted = counted_module(model)
    slim_model(counted, subnet)
    return complexity(counted, inputs)


def model_rows(model: torch.nn.Module, inputs: torch.Tensor) -> List[Tuple[str, Complexity]]:
    """The rows of the model itself: a supernet's max and min subnet, else the model.

    Raises:
        InputError: naming the module that cannot take ``inputs``.
    """
    if is_nas(model):
        space = model.search_space
        # the fewest FLOPs: an op's first choice need not be, with widths nested in ops
        cheapest = space.cheapest(lambda choices: subnet_complexity(model, choices, inputs).flops)
        return [('max subnet', subnet_complexity(model, space.max_subnet(), inputs)),
                ('min subnet', subnet_complexity(model, cheapest, inputs))]
    if hasattr(model, 'set_max_subnet'):
        model.set_max_subnet()
        widest = complexity(model, inputs)
        model.set_min_subnet()
        return [('max subnet', widest), ('min subnet', complexity(model, inputs))]
    return [('model', complexity(counted_module(model), inputs))]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    import torch

    from razorlib.engine.config import ConfigError, build_model, check_config, load_config
    from razorlib.engine.threads import set_threads
    from razorlib.utils.cli import merge_cfg_options, refuse
    from razorlib.utils.complexity import human

    try:
        cfg = merge_cfg_options(load_config(args.config), args.cfg_options, error=ConfigError)
        check_config(cfg, required=('model', ))
        model = build_model(counted_config(cfg)).eval()
    except ConfigError as err:
        return refuse(err, args.config)
    set_threads(args.threads, model)
    try:
        shape = input_shape(args.shape, model)
    except ConfigError as err:
        return refuse(err)
    inputs = torch.randn(1, *shape)
    try:
        rows = model_rows(model, inputs)
    except InputError as err:
        default = '' if args.shape else ' (not given; pass the input the model takes)'
        return refuse(err, f'--shape{default}')
    if args.subnet:
        try:
            rows.append(('subnet', subnet_complexity(model, args.subnet, inputs)))
        except (ValueError, FileNotFoundError) as err:
            return refuse(err, f'--subnet {args.subnet}')
    print_log(f"{type(model).__name__} on input 1x{'x'.join(map(str, shape))}",
              logger='current')
    print_log(f"{'':12}{'FLOPs':>10}{'params':>10}", logger='current')
    for name, complexity in rows:
        print_log(f'{name:12}{human(complexity.flops):>10}{human(complexity.params):>10}',
                  logger='current')
    return 0


if __name__ == '__main__':
    sys.exit(main())
