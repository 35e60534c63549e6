"""RatioPruner: AutoSlim-style width sampling that keeps the first channels."""
from typing import Dict, Sequence, Union

import numpy as np

from ..registry import PRUNERS
from .structure import StructurePruner

#: AutoSlim's default width choices: 2/12 ... 12/12.
AUTOSLIM_RATIOS = tuple(i / 12 for i in range(2, 13))


@PRUNERS.register_module()
class RatioPruner(StructurePruner):
    """Samples a width ratio per space and keeps the first channels (a prefix).

    Keeping a prefix is what lets a slimmable supernet share weights between widths.

    Args:
        ratios: the width ratios to sample from, or one ratio (``ratio=`` is the same
            argument).
        except_start_keys: module-name prefixes whose output channels are never pruned.
        strict: raise instead of freezing channels the tracer cannot handle.

    Example:
        >>> pruner = RatioPruner(ratios=(0.25, 0.5, 1.0))
        >>> pruner.prepare_from_supernet(model)        # doctest: +SKIP
        >>> pruner.set_subnet(pruner.sample_subnet())  # doctest: +SKIP
    """

    def __init__(self, ratios: Union[float, Sequence[float], None] = None, **kwargs):
        if ratios is None and kwargs.get('ratio') is None:
            ratios = AUTOSLIM_RATIOS
        super().__init__(ratios=ratios, **kwargs)

    def channel_orders(self) -> Dict[str, np.ndarray]:
        return {gid: np.arange(g.num_channels)
                for gid, g in self._require_prepared().prunable.items()}
