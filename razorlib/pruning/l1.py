"""L1NormPruner: keep the channels whose weights have the largest L1 norm in the group."""
from typing import Any, Sequence, Union

from ..registry import PRUNERS
from .importance import ImportanceArg
from .importance.pruner import ImportancePruner


@PRUNERS.register_module()
class L1NormPruner(ImportancePruner):
    """An :class:`~razorlib.pruning.ImportancePruner` whose criterion defaults to ``'l1'``.

    A channel's score adds the L1 norms of every conv/linear weight slice that pruning it
    removes: the output filters of all layers bound in the group and the input columns of
    the layers that read it (:class:`~razorlib.pruning.importance.L1Importance`).  Kept
    channels are arbitrary indices, not a prefix.

    Args:
        ratios: the fraction of channels to keep, or a sequence to sample from
            (``ratio=`` is the same argument); default 0.5.
        importance: the criterion; ``L1NormPruner(importance=...)`` is an
            ``ImportancePruner``.
        **kwargs: :class:`~razorlib.pruning.ImportancePruner`'s (``flops``, ``params``,
            ``global_ranking``, ``round_to``, ``max_ratio``, ``except_start_keys``,
            ``strict``, ...).

    Example:
        >>> pruner = L1NormPruner(ratio=0.5)
        >>> pruner.prepare_from_supernet(model)        # doctest: +SKIP
        >>> pruner.set_subnet(pruner.sample_subnet())  # doctest: +SKIP
    """

    def __init__(self, ratios: Union[float, Sequence[float], None] = None,
                 importance: ImportanceArg = 'l1', **kwargs: Any):
        super().__init__(ratios, importance=importance, **kwargs)
