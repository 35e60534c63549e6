"""DumpSubnetHook: write subnets' channel configs, and a search's results JSON, to work_dir."""
import json
from pathlib import Path
from typing import Dict, Optional

from mmengine.dist import is_main_process

from ...registry import HOOKS
from ...utils.files import atomic_write_text
from ..loops.results import SearchResult
from ..utils import unwrap
from .search_hook import SearchHook

RULES = ('greater', 'less')


@HOOKS.register_module()
class DumpSubnetHook(SearchHook):
    """Save subnets as channel config YAMLs in the work directory.

    In training:

    - after every validation: ``subnet_latest.yaml``, and ``subnet_best.yaml`` when the
      metric ``save_best`` improved (by ``rule``);
    - after training: ``subnet_final.yaml``.

    In a search (``after_search``): ``<name>.yaml`` for each subnet the search chose
    (``subnet_flops<target>.yaml`` of the greedy search, ``best_subnet.yaml`` of the
    evolution), and one results JSON, ``results_file``: per chosen subnet its
    ``file`` (relative to the JSON), ``limits``, ``flops``, ``params``, ``score``,
    ``metrics``, ``widths`` and ``tag``, then the search's settings, ``history``,
    ``pareto_front``, every record and the sections other hooks added
    (:meth:`SearchResult.to_dict`).  The candidates' validation epochs of a search
    write nothing.

    The YAMLs are what ``export_subnet()`` returns (AutoSlim), which
    ``tools/prune.py --subnet`` and the ``sub_model`` retrain config read.  Only the
    main process writes.  The best score is kept in the message hub, so it survives a
    resume.

    Args:
        save_best: a validation metric, e.g. ``'accuracy/top1'``; ``None`` to save no
            best subnet.
        rule: ``'greater'`` or ``'less'``: which way ``save_best`` improves.
        out_dir: where to write; default the runner's ``work_dir``.
        results_file: the name of a search's results JSON.

    Example:
        >>> custom_hooks = [dict(type='DumpSubnetHook', save_best='accuracy/top1')]
    """
    priority = 'LOW'
    BEST_KEY = 'dump_subnet_best_score'

    def __init__(self, save_best: Optional[str] = None, rule: str = 'greater',
                 out_dir: Optional[str] = None, results_file: str = 'search_results.json'):
        if rule not in RULES:
            raise ValueError(f'rule must be one of {RULES}, got {rule!r}')
        self.save_best = save_best
        self.rule = rule
        self.out_dir = out_dir
        self.results_file = results_file
        self._searching = False

    def before_run(self, runner) -> None:
        if not hasattr(unwrap(runner.model), 'export_subnet'):
            raise TypeError('DumpSubnetHook needs a model with export_subnet() (e.g. '
                            f'AutoSlim), got {type(unwrap(runner.model)).__name__}')

    def folder(self, runner) -> Path:
        """Where the files go: ``out_dir``, else the runner's work dir."""
        return Path(self.out_dir or runner.work_dir)

    def _dump(self, runner, name: str) -> Path:
        path = self.folder(runner) / name
        if is_main_process():
            unwrap(runner.model).export_subnet().dump(path)
        return path

    def after_val_epoch(self, runner, metrics: Optional[Dict[str, float]] = None) -> None:
        if self._searching:
            return  # a search candidate: the search's results are written at its end
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

    def before_search(self, runner) -> None:
        self._searching = True

    def after_search(self, runner, result: SearchResult) -> None:
        """Write each chosen subnet's YAML (recorded in ``result.files``) and the
        results JSON."""
        self._searching = False
        folder = self.folder(runner)
        for name, config in result.configs.items():
            result.files[name] = folder / f'{name}.yaml'
            if is_main_process():
                config.dump(result.files[name])
        path = folder / self.results_file
        if is_main_process():
            atomic_write_text(path, json.dumps(result.to_dict(folder), indent=1))
        runner.logger.info(f'search results: {", ".join(map(str, result.files.values()))} '
                           f'and {path}')
