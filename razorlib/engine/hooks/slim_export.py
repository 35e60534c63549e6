"""SlimExportHook: write the pruned model, sliced, and its channel config to work_dir."""
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import torch
from mmengine.dist import is_main_process
from mmengine.hooks import EMAHook, Hook

from ...registry import HOOKS
from ...utils.caller import warn_at_caller
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

    With an mmengine ``EMAHook`` registered, the averaged weights are exported: those
    the runner validated and checkpointed (``EMAHook`` swaps them in only around
    validation and checkpoint saves; after training the model holds the raw ones).  The
    log names which weights were saved.  A pruning algorithm with
    ``EMAHook(update_buffers=True)`` is refused: its masks are buffers, and averaged they
    hold fractions, so the averaged model is no pruned subnet.

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
        model = unwrap(runner.model)
        if not hasattr(model, 'slim_architecture'):
            raise TypeError('SlimExportHook needs a model with slim_architecture() (a '
                            'pruning algorithm or SingleTeacherDistill), got '
                            f'{type(model).__name__}')
        ema_hook = _ema_hook(runner)
        if (ema_hook is not None and hasattr(model, 'export_subnet')
                and ema_hook.ema_cfg.get('update_buffers', False)):
            raise ValueError(f'SlimExportHook: EMAHook(update_buffers=True) averages the '
                             f'buffers of {type(model).__name__}, its pruning masks among '
                             'them: the averaged model is no pruned subnet and cannot be '
                             'exported. Leave EMAHook its default update_buffers=False.')

    def before_train(self, runner) -> None:
        """Warn when the run ends before the pruning schedule does (a warning, not an
        error: a resumed run may go on with it)."""
        model = unwrap(runner.model)
        max_iters = getattr(runner, 'max_iters', None)
        if hasattr(model, 'schedule_overrun') and max_iters:
            message = model.schedule_overrun(int(max_iters))
            if message:
                runner.logger.warning(message)
                warn_at_caller(message)

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
            warn_at_caller(message)
        if is_main_process():
            folder.mkdir(parents=True, exist_ok=True)
            if hasattr(model, 'export_subnet'):
                model.export_subnet().dump(folder / f'{self.name}.yaml')
                written.append(folder / f'{self.name}.yaml')
            ema_hook = _ema_hook(runner)
            with _ema_weights_in(ema_hook):
                torch.save(model.slim_architecture().state_dict(), folder / f'{self.name}.pth')
            written.append(folder / f'{self.name}.pth')
            weights = ('the EMA weights of EMAHook (as validated and checkpointed)'
                       if ema_hook is not None else 'the training weights')
            runner.logger.info(f'slim model saved with {weights}: '
                               f'{", ".join(map(str, written))}')


def _ema_hook(runner) -> Optional[EMAHook]:
    """The runner's ``EMAHook``, or None; more than one is refused (which one's weights
    were validated would depend on their order)."""
    found = [hook for hook in runner.hooks if isinstance(hook, EMAHook)]
    if len(found) > 1:
        raise ValueError(f'SlimExportHook: the runner has {len(found)} EMAHooks; export '
                         'takes the averaged weights of one')
    return found[0] if found else None


@contextmanager
def _ema_weights_in(ema_hook: Optional[EMAHook]) -> Iterator[None]:
    """The model holds the averaged weights inside the block and its own after it: the
    swap ``EMAHook`` itself makes around validation (its own method, so the weights are
    the ones it validated).  Nothing is swapped without an ``EMAHook``."""
    if ema_hook is None:
        yield
        return
    ema_hook._swap_ema_parameters()
    try:
        yield
    finally:
        ema_hook._swap_ema_parameters()
