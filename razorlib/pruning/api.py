"""``razorlib.prune``: trace, pick channels and slim a model in one call."""
import copy
from typing import Any, Union

import torch
import torch.nn as nn

from ..registry import PRUNERS
from ..tracing.forward import call_model, default_example_inputs


def prune(model: nn.Module, example_inputs: Any = None, ratio: float = 0.5,
          pruner: Union[str, dict] = 'L1NormPruner', **pruner_kwargs) -> nn.Module:
    """Return a slimmed copy of ``model`` that keeps ``ratio`` of each prunable group.

    The original model is left untouched.  The slim copy is run once on
    ``example_inputs`` before it is returned, so a model whose code cannot follow the
    new widths fails here, with the module at fault named, rather than later.

    Args:
        model: the model to prune.
        example_inputs: a tensor, tuple of args or dict of kwargs for one forward;
            default a random 1x3x224x224 image.
        ratio: fraction of channels to keep in each prunable group.
        pruner: a pruner type registered in ``PRUNERS`` or a config dict.
        **pruner_kwargs: extra pruner arguments (``except_start_keys``, ``strict``).

    Example:
        >>> import torch, razorlib
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16),
        ...                           torch.nn.ReLU(), torch.nn.Conv2d(16, 4, 1))
        >>> razorlib.prune(net, torch.randn(1, 3, 8, 8), ratio=0.25)[1].num_features
        4
    """
    cfg = dict(type=pruner) if isinstance(pruner, str) else dict(pruner)
    if 'ratio' not in cfg and 'ratios' not in cfg:
        cfg['ratio' if cfg['type'] == 'L1NormPruner' else 'ratios'] = \
            ratio if cfg['type'] == 'L1NormPruner' else (ratio, )
    cfg.update(pruner_kwargs)
    structure_pruner = PRUNERS.build(cfg)
    if example_inputs is None:
        example_inputs = default_example_inputs(model)
    slim = copy.deepcopy(model)
    structure_pruner.prepare_from_supernet(slim, example_inputs)
    structure_pruner.set_subnet(structure_pruner.sample_subnet())
    structure_pruner.deploy_subnet(slim, structure_pruner.export_subnet())
    training = slim.training
    slim.eval()
    try:
        with torch.no_grad():
            call_model(slim, example_inputs)
    except RuntimeError as err:
        raise RuntimeError(f'the pruned model does not run: {err}. Its code probably '
                           'hard-codes a channel count; exclude the module with '
                           'except_start_keys') from err
    finally:
        slim.train(training)
    return slim
