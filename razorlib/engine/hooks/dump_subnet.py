"""DumpSubnetHook: write the current (and the best) subnet's channel config to work_dir."""
from pathlib import Path
from typing import Dict, Optional

from mmengine.dist import is_main_process
from mmengine.hooks import Hook

from ...registry import HOOKS
from ..utils import unwrap

RULES = ('greater', 'less')


@HOOKS.register_module()
class DumpSubnetHook(Hook):
    """Save the model's current subnet as a channel config YAML in the work directory.

    - after every validation: ``subnet_latest.yaml``, and ``subnet_best.yaml`` when the
      metric ``save_best`` improved (by ``rule``);
    - after training: ``subnet_final.yaml``.

    The files are what ``export_subnet()`` returns (AutoSlim), which
    ``tools/prune.py --subnet`` and the ``sub_model`` retrain config read.  Only the
    main process writes.  The best score is kept in the message hub, so it survives a
    resume.

    Args:
        save_best: a validation metric, e.g. ``'accuracy/top1'``; ``None`` to save no
            best subnet.
        rule: ``'greater'`` or ``'less'``: which way ``save_best`` improves.
        out_dir: where to write; default the runner's ``work_dir``.

    Example:
        >>> custom_hooks = [dict(type='DumpSubnetHook', save_best='accuracy/top1')]
    """
    priority = 'LOW'
    BEST_KEY = 'dump_subnet_best_score'

    def __init__(self, save_best: Optional[str] = None, rule: str = 'greater',
                 out_dir: Optional[str] = None):
        if rule not in RULES:
            raise ValueError(f'rule must be one of {RULES}, got {rule!r}')
        self.save_best = save_best
        self.rule = rule
        self.out_dir = out_dir

    def before_run(self, runner) -> None:
        if not hasattr(unwrap(runner.model), 'export_subnet'):
            raise TypeError('DumpSubnetHook needs a model with export_subnet() (e.g. '
                            f'AutoSlim), got {type(unwrap(runner.model)).__name__}')

    def _dump(self, runner, name: str) -> Path:
        path = Path(self.out_dir or runner.work_dir) / name
        if is_main_process():
            unwrap(runner.model).export_subnet().dump(path)
        return path

    def after_val_epoch(self, runner, metrics: Optional[Dict[str, float]] = None) -> None:
        self._dump(runner, 'subnet_latest.yaml')
        if self.save_best is None:
            return
        metrics = metrics or {}
        if self.save_best not in metrics:
            raise KeyError(f'DumpSubnetHook: save_best={self.save_best!r} is not a '
                           f'validation metric; they are {sorted(metrics)}')
        score = float(metrics[self.save_best])
        best = runner.message_hub.get_info(self.BEST_KEY)
        if best is None or (score > best if self.rule == 'greater' else score < best):
            runner.message_hub.update_info(self.BEST_KEY, score)
            path = self._dump(runner, 'subnet_best.yaml')
            runner.logger.info(f'best subnet so far ({self.save_best} {score:.4f}) '
                               f'saved to {path}')

    def after_train(self, runner) -> None:
        path = self._dump(runner, 'subnet_final.yaml')
        runner.logger.info(f'final subnet saved to {path}')
