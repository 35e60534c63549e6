"""EpochSeedHook: seed the global RNGs per epoch (per batch in an iteration-based loop), so
a resumed run draws what an uninterrupted one would."""
from typing import Callable, Iterator, Optional

import numpy as np
from mmengine.hooks import Hook
from mmengine.runner import IterBasedTrainLoop
from mmengine.runner.utils import set_random_seed

from ...registry import HOOKS


def epoch_seed(seed: int, epoch: int) -> int:
    """A 32-bit seed mixed from a run's seed and an epoch index.

    Example:
        >>> epoch_seed(0, 1) == epoch_seed(0, 1) != epoch_seed(0, 2)
        True
    """
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def iteration_seed(seed: int, iteration: int) -> int:
    """A 32-bit seed mixed from a run's seed and a training iteration index, apart from
    the epoch seeds (another spawn key).

    Example:
        >>> iteration_seed(0, 1) == iteration_seed(0, 1) != iteration_seed(0, 2)
        True
        >>> iteration_seed(0, 1) != epoch_seed(0, 1)
        True
    """
    return int(np.random.SeedSequence([seed, iteration], spawn_key=(1, )).generate_state(1)[0])


class SeededBatches:
    """An iterator of training batches that re-seeds the global RNGs before it fetches
    each one, from the batch's index (counted from 0).

    An iteration-based loop resumed at iteration ``k`` fetches, and drops, the batches
    0 to ``k - 1`` before it trains on batch ``k``; seeded so, batch ``k`` (its
    augmentation) and the training step that follows draw the same numbers as in the
    uninterrupted run, whatever drew from the RNGs before the checkpoint (a pruning
    step, a validation run).

    Args:
        batches: the loop's iterator of batches.
        reseed: called with the batch index before each fetch.
    """

    def __init__(self, batches: Iterator, reseed: Callable[[int], None]):
        self.batches, self.reseed, self.fetched = batches, reseed, 0

    def __iter__(self) -> 'SeededBatches':
        return self

    def __next__(self):
        self.reseed(self.fetched)
        self.fetched += 1
        return next(self.batches)


@HOOKS.register_module()
class EpochSeedHook(Hook):
    """Re-seed Python's, numpy's and torch's global RNGs before every training epoch, and
    in an iteration-based loop (``IterBasedTrainLoop``) before every batch is fetched.

    mmengine seeds the global RNGs once, when the Runner starts, and its checkpoints do
    not hold their states; after a resume the augmentations (and dropout) of the next
    epoch would draw other numbers than in the uninterrupted run.  Seeded from the
    run's seed and the epoch index, every epoch draws the same numbers whether the run
    was resumed before it or not.  An iteration-based loop is one long epoch, and its
    checkpoints fall between iterations: there the seed is the run's seed and the
    iteration index, mixed apart from the epoch seeds (see :class:`SeededBatches`).
    (Dataloader workers are seeded by mmengine's ``worker_init_fn``;
    ``persistent_workers=True`` keeps them, and their RNG states, across epochs, which a
    resume cannot reproduce.)

    Args:
        diff_rank_seed: add the process rank to the seed; default the Runner's
            ``randomness.diff_rank_seed``.

    Example:
        >>> default_hooks = dict(epoch_seed=dict(type='EpochSeedHook'))  # in a config
    """
    priority = 'VERY_HIGH'

    def __init__(self, diff_rank_seed: Optional[bool] = None):
        self.diff_rank_seed = diff_rank_seed

    def before_train(self, runner) -> None:
        loop = runner.train_loop
        if isinstance(loop, IterBasedTrainLoop) and \
                not isinstance(loop.dataloader_iterator, SeededBatches):
            loop.dataloader_iterator = SeededBatches(
                loop.dataloader_iterator,
                lambda index: self.seed(runner, iteration_seed(runner.seed, index)))

    def before_train_epoch(self, runner) -> None:
        self.seed(runner, epoch_seed(runner.seed, runner.epoch))

    def seed(self, runner, seed: int) -> None:
        """Seed the global RNGs with ``seed`` (plus the rank with ``diff_rank_seed``)."""
        diff_rank_seed = self.diff_rank_seed
        if diff_rank_seed is None:
            diff_rank_seed = bool((runner.cfg.get('randomness') or {}).get('diff_rank_seed'))
        set_random_seed(seed, diff_rank_seed=diff_rank_seed)
