"""EpochSeedHook: seed the global RNGs per epoch, so a resumed run draws what an
uninterrupted one would."""
from typing import Optional

import numpy as np
from mmengine.hooks import Hook
from mmengine.runner.utils import set_random_seed

from ...registry import HOOKS


def epoch_seed(seed: int, epoch: int) -> int:
    """A 32-bit seed mixed from a run's seed and an epoch index.

    Example:
        >>> epoch_seed(0, 1) == epoch_seed(0, 1) != epoch_seed(0, 2)
        True
    """
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


@HOOKS.register_module()
class EpochSeedHook(Hook):
    """Re-seed Python's, numpy's and torch's global RNGs before every training epoch.

    mmengine seeds the global RNGs once, when the Runner starts, and its checkpoints do
    not hold their states; after a resume the augmentations (and dropout) of the next
    epoch would draw other numbers than in the uninterrupted run.  Seeded from the
    run's seed and the epoch index, every epoch draws the same numbers whether the run
    was resumed before it or not.  (Dataloader workers are seeded by mmengine's
    ``worker_init_fn``; ``persistent_workers=True`` keeps them, and their RNG states,
    across epochs, which a resume cannot reproduce.)

    Args:
        diff_rank_seed: add the process rank to the seed; default the Runner's
            ``randomness.diff_rank_seed``.

    Example:
        >>> default_hooks = dict(epoch_seed=dict(type='EpochSeedHook'))  # in a config
    """
    priority = 'VERY_HIGH'

    def __init__(self, diff_rank_seed: Optional[bool] = None):
        self.diff_rank_seed = diff_rank_seed

    def before_train_epoch(self, runner) -> None:
        diff_rank_seed = self.diff_rank_seed
        if diff_rank_seed is None:
            diff_rank_seed = bool((runner.cfg.get('randomness') or {}).get('diff_rank_seed'))
        set_random_seed(epoch_seed(runner.seed, runner.epoch), diff_rank_seed=diff_rank_seed)
