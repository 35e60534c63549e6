"""SearchHook: the hook stages razorlib's search loops add to mmengine's, in one place.

mmengine's ``Runner.call_hook(name, **kwargs)`` calls ``name`` on every hook that has a
method of that name, so a search stage is an ordinary hook method; this class names the
stages with their arguments.
"""
from typing import List

from mmengine.hooks import Hook
from mmengine.utils import is_method_overridden

from ..loops.results import SearchResult, SubnetRecord

#: The stages of a search, in the order a search calls them.
SEARCH_STAGES = ('before_search', 'after_search_candidate', 'after_search_step',
                 'after_search')


class SearchHook(Hook):
    """Base class of hooks that act at the stages of a search.

    A search runs as the runner's validation loop (``runner.val()``), so it calls::

        before_val
          before_search
          per candidate:   before_val_epoch, before/after_val_iter per batch,
                           after_val_epoch(metrics)        (SubnetValLoop.validate)
                           after_search_candidate(record)
          per greedy step / generation:  after_search_step(step, best)
          after_search(result)
        after_val

    Any hook (not only a subclass) may define these methods; subclassing documents
    them and gives :meth:`search_stages`.  (mmengine's table of hooks per stage, in the
    runner's log, lists only mmengine's own stages.)

    Example:
        >>> class Progress(SearchHook):
        ...     def after_search_step(self, runner, step, best):
        ...         print(f'step {step}: best {best.score}')
        >>> Progress().search_stages()
        ['after_search_step']
    """

    def before_search(self, runner) -> None:
        """The search starts (after the checkpoint was loaded)."""

    def after_search_candidate(self, runner, record: SubnetRecord) -> None:
        """A candidate was scored: ``record`` holds its widths, FLOPs, params, score and
        every metric.  The model is set back to the subnet it had before."""

    def after_search_step(self, runner, step: int, best: SubnetRecord) -> None:
        """A greedy step or an evolution generation ended.

        Args:
            runner: the runner.
            step: the step's (generation's) index, from 0.
            best: the subnet the greedy step kept, or the best subnet so far.
        """

    def after_search(self, runner, result: SearchResult) -> None:
        """The search ended; ``result`` holds every record and the chosen subnets."""

    def search_stages(self) -> List[str]:
        """The search stages this hook acts at (the methods it overrides)."""
        return [stage for stage in SEARCH_STAGES
                if is_method_overridden(stage, SearchHook, self)]
