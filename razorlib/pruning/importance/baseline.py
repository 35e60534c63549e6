"""The random criterion: the baseline every other criterion should beat."""
import zlib
from typing import Dict, Optional

import numpy as np

from ...registry import IMPORTANCES
from ...utils.checks import integer_number
from .base import NORMALIZERS, Importance, ImportanceContext

__all__ = ['RandomImportance']


@IMPORTANCES.register_module(name=['RandomImportance', 'random'])
class RandomImportance(Importance):
    """Uniform random scores, reproducible: each group's are drawn from a generator
    seeded with ``seed`` and the group's id, so they do not depend on which other groups
    the model has.

    Args:
        seed: the seed; the same seed gives the same scores.
        normalize: per-group normalisation (see :class:`Importance`).

    Example:
        >>> RandomImportance(seed=1).draw('conv1', 3).round(3).tolist()
        [0.868, 0.325, 0.656]
    """
    shown = ('seed', 'normalize')

    def __init__(self, seed: int = 0, normalize: Optional[str] = None):
        super().__init__(normalize=normalize)
        self.seed = integer_number(seed, 'RandomImportance: seed')  # int('a'): a bare error

    def draw(self, group_id: str, channels: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, zlib.crc32(group_id.encode())])
        return rng.random(channels)

    def __call__(self, ctx: ImportanceContext) -> Dict[str, np.ndarray]:
        return {g.id: NORMALIZERS[self.normalize](self.draw(g.id, g.num_channels))
                for g in ctx.prunable}
