"""GroupFisher on CPU DDP (gloo, 2 processes): the Fisher buffer holds every process's
share, so the checkpoint the main process alone writes is whole and a run resumed from
it prunes as the uninterrupted one."""
import copy
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import OptimWrapper

from pruning_helpers import LinearChain
from razorlib.algorithms import GroupFisherAlgorithm

WORLD_SIZE = 2
STEPS = 8  # decisions before iterations 3 and 6
SAVED_AFTER = 4  # a checkpoint in the middle of the second interval


def chain_fisher() -> GroupFisherAlgorithm:
    return GroupFisherAlgorithm(LinearChain(), input_shape=(2, ), interval=3, start=0,
                                pruner=dict(type='ImportancePruner', ratio=0.5,
                                            importance=dict(type='fisher')))


def batch(rank: int, step: int) -> dict:
    """Each process's batches weigh other channels (other input scales), so a decision
    on one process's Fisher alone differs from one on the sum."""
    generator = torch.Generator().manual_seed(100 * rank + step)
    scale = torch.tensor([0.1, 3.0]) if rank == 0 else torch.tensor([3.0, 0.1])
    return dict(inputs=torch.randn(4, 2, generator=generator) * scale,
                data_samples=torch.randn(4, 1, generator=generator))


def train(model: torch.nn.Module, steps: range, rank: int) -> None:
    """Steps at lr 0: the weights stay put, only the Fisher and the masks move."""
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.0))
    for step in steps:
        model.train_step(batch(rank, step), optim)


def ddp_worker(rank: int, store: str, state: dict, out: str) -> None:
    # A file store, not a TCP port: nothing to collide with on a shared machine.
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank,
                            world_size=WORLD_SIZE, timeout=timedelta(seconds=120))
    try:
        result = {}
        straight = chain_fisher()
        straight.load_state_dict(state)
        wrapper = MMDistributedDataParallel(module=straight, device_ids=None,
                                            broadcast_buffers=False)
        train(wrapper, range(SAVED_AFTER + 1), rank)
        result['fisher_at_save'] = straight.fisher.clone()
        if rank == 0:  # as the Runner: only the main process calls state_dict()
            torch.save(copy.deepcopy(straight.state_dict()), f'{out}/checkpoint.pth')
        train(wrapper, range(SAVED_AFTER + 1, STEPS), rank)
        result['straight'] = straight.kept_channels.clone()
        dist.barrier()
        resumed = chain_fisher()
        resumed.load_state_dict(torch.load(f'{out}/checkpoint.pth'))
        resumed_wrapper = MMDistributedDataParallel(module=resumed, device_ids=None,
                                                    broadcast_buffers=False)
        train(resumed_wrapper, range(SAVED_AFTER + 1, STEPS), rank)
        result['resumed'] = resumed.kept_channels.clone()
        torch.save(result, f'{out}/rank{rank}.pth')
        del wrapper, resumed_wrapper  # free the DDP reducers while the group is alive
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # multi-process runs
def test_a_resumed_ddp_run_prunes_as_the_uninterrupted_one(tmp_path):
    start = copy.deepcopy(chain_fisher().state_dict())
    # One process on both processes' samples: the loss is a sum over samples, so its
    # Fisher (a sum over samples) is the sum of the two processes'.
    both = chain_fisher()
    both.load_state_dict(start)
    optim = OptimWrapper(torch.optim.SGD(both.parameters(), lr=0.0))
    expected = {}
    for step in range(STEPS):
        parts = [batch(rank, step) for rank in range(WORLD_SIZE)]
        both.train_step({key: torch.cat([part[key] for part in parts]) for key in parts[0]},
                        optim)
        if step == SAVED_AFTER:
            expected['fisher_at_save'] = both.fisher.clone()
    mp.spawn(ddp_worker, args=(str(tmp_path / 'store'), start, str(tmp_path)),
             nprocs=WORLD_SIZE)
    saved = torch.load(tmp_path / 'checkpoint.pth')
    ranks = [torch.load(tmp_path / f'rank{rank}.pth') for rank in range(WORLD_SIZE)]
    assert expected['fisher_at_save'].sum() > 0
    assert torch.allclose(saved['fisher'], expected['fisher_at_save'], rtol=1e-12)
    for result in ranks:
        assert torch.allclose(result['fisher_at_save'], expected['fisher_at_save'],
                              rtol=1e-12)
        assert torch.equal(result['straight'], both.kept_channels)
        assert torch.equal(result['resumed'], both.kept_channels)
    assert int(both.kept_channels.sum()) == 5  # two decisions: 7 -> 6 -> 5 channels
