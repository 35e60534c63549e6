"""AutoSlimDDP on CPU (gloo, 2 processes): one sandwich step averages the ranks' gradients."""
import copy
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from mmengine.logging import MessageHub
from mmengine.optim import OptimWrapper

from razorlib.algorithms import AutoSlim, AutoSlimDDP

WORLD_SIZE = 2


def tiny_autoslim() -> AutoSlim:
    torch.manual_seed(0)
    return AutoSlim(
        architecture=dict(type='ImageClassifier',
                          backbone=dict(type='PlainCNN', channels=(8, 16)),
                          head=dict(type='LinearClsHead', num_classes=10)),
        input_shape=(3, 8, 8))


def batches() -> list:
    generator = torch.Generator().manual_seed(1)
    return [dict(inputs=torch.rand(6, 3, 8, 8, generator=generator),
                 data_samples=torch.randint(0, 10, (6, ), generator=generator))
            for _ in range(WORLD_SIZE)]


def plain_sgd(model: torch.nn.Module) -> OptimWrapper:
    return OptimWrapper(torch.optim.SGD(model.parameters(), lr=1.0))


def ddp_worker(rank: int, store: str, state: dict, result: str) -> None:
    # A file store, not a TCP port: nothing to collide with on a shared machine.
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank,
                            world_size=WORLD_SIZE, timeout=timedelta(seconds=120))
    try:
        MessageHub.get_instance('ddp_test').update_info('seed', 7)
        model = tiny_autoslim()
        model.load_state_dict(state)
        wrapper = AutoSlimDDP(module=model, device_ids=None)
        wrapper.train_step(batches()[rank], plain_sgd(model))
        if rank == 0:
            torch.save({name: p.detach() for name, p in model.named_parameters()}, result)
        del wrapper  # free the DDP reducer while its process group is alive
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # a multi-process run
def test_ddp_step_applies_the_mean_of_the_ranks_sandwich_gradients(tmp_path):
    MessageHub.get_instance('ddp_test_main').update_info('seed', 7)
    start = tiny_autoslim()
    state = copy.deepcopy(start.state_dict())
    # Each rank's gradient, alone: with SGD at lr 1, the step is minus the gradient.
    steps = []
    for batch in batches():
        model = tiny_autoslim()
        model.load_state_dict(state)
        model.train_step(batch, plain_sgd(model))
        steps.append({name: p.detach() - start.get_parameter(name)
                      for name, p in model.named_parameters()})
    result = tmp_path / 'rank0.pth'
    mp.spawn(ddp_worker, args=(str(tmp_path / 'store'), state, str(result)), nprocs=WORLD_SIZE)
    trained = torch.load(result)
    for name, p in start.named_parameters():
        expected = p.detach() + (steps[0][name] + steps[1][name]) / 2
        assert torch.allclose(trained[name], expected, atol=1e-6), name
    assert any(not torch.allclose(steps[0][n], steps[1][n]) for n in trained)
