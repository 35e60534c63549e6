"""SlimExportHook: write the pruned model, sliced, and its channel config to work_dir."""
import warnings
from pathlib import Path
from typing import Optional

import torch
from mmengine.dist import is_main_process
from mmengine.hooks import Hook

from ...registry import HOOKS
from ..utils import unwrap


@HOOKS.register_module()
class SlimExportHook(Hook):
    """After training, save what deployment needs from a pruning (or distillation) run.

    - ``<name>.yaml``: the pruned subnet's channel config (``model.export_subnet()``),
      for models that have one (the pruning algorithms);
    - ``<name>.pth``: the ``state_dict`` of the slim model (``model.slim_architecture()``:
      the architecture sliced to the subnet, or a distilled student).

    The slim model is rebuilt without the pruner, as ``tools/prune.py``'s output is::

        slim = sub_model(architecture_cfg, '<work_dir>/slim.yaml')
        slim.load_state_dict(torch.load('<work_dir>/slim.pth'))

    or, in a fine-tuning config, ``model = dict(type='sub_model', architecture=...,
    channel_cfg='.../slim.yaml')`` with ``load_from='.../slim.pth'``.  Only the main
    process writes.

    Args:
        name: the files' name, without suffix.
        out_dir: where to write; default the runner's ``work_dir``.

    Example:
        >>> custom_hooks = [dict(type='SlimExportHook')]  # in a pruning config
    """
    priority = 'LOW'

    def __init__(self, name: str = 'slim', out_dir: Optional[str] = None):
        self.name, self.out_dir = name, out_dir

    def before_run(self, runner) -> None:
        if not hasattr(unwrap(runner.model), 'slim_architecture'):
            raise TypeError('SlimExportHook needs a model with slim_architecture() (a '
                            'pruning algorithm or SingleTeacherDistill), got '
                            f'{type(unwrap(runner.model)).__name__}')

    def before_train(self, runner) -> None:
        """Warn when the run ends before the pruning schedule does (a warning, not an
        error: a resumed run may go on with it)."""
        model = unwrap(runner.model)
        max_iters = getattr(runner, 'max_iters', None)
        if hasattr(model, 'schedule_overrun') and max_iters:
            message = model.schedule_overrun(int(max_iters))
            if message:
                runner.logger.warning(message)
                warnings.warn(message, stacklevel=2)

    def after_train(self, runner) -> None:
        model = unwrap(runner.model)
        folder = Path(self.out_dir or runner.work_dir)
        written = []
        if getattr(model, 'target_met', True) is False:
            metric, value = model.target
            message = (f'SlimExportHook: training ended before pruning reached its target: '
                       f'the slim model keeps {float(model.kept_fraction):.4f} of the dense '
                       f"model's {metric}, the target is {value:g} "
                       f'(after {int(model.step_count)} iterations)')
            runner.logger.warning(message)
            warnings.warn(message, stacklevel=2)
        if is_main_process():
            folder.mkdir(parents=True, exist_ok=True)
            if hasattr(model, 'export_subnet'):
                model.export_subnet().dump(folder / f'{self.name}.yaml')
                written.append(folder / f'{self.name}.yaml')
            torch.save(model.slim_architecture().state_dict(), folder / f'{self.name}.pth')
            written.append(folder / f'{self.name}.pth')
            runner.logger.info(f'slim model saved: {", ".join(map(str, written))}')
