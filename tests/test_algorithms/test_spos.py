"""SPOS: one seeded path per step, fair sampling, subnet interface, and DDP on CPU."""
import copy
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from mmengine.logging import MessageHub
from mmengine.optim import OptimWrapper

from razorlib.algorithms import SPOS, SPOSDDP
from razorlib.nas import FixedSubnet, remaining_mutables

WORLD_SIZE = 2
ARCH = dict(type='ImageClassifier',
            backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 2, 2)],
                          stem_channels=8, stem='cifar', last_channels=None),
            head=dict(type='LinearClsHead', num_classes=10))


def tiny_spos(fair: bool = False) -> SPOS:
    torch.manual_seed(0)
    return SPOS(ARCH, fair_sampling=fair, input_shape=(3, 8, 8))


def batches() -> list:
    generator = torch.Generator().manual_seed(1)
    return [dict(inputs=torch.rand(6, 3, 8, 8, generator=generator),
                 data_samples=torch.randint(0, 10, (6, ), generator=generator))
            for _ in range(WORLD_SIZE)]


def plain_sgd(model: torch.nn.Module) -> OptimWrapper:
    return OptimWrapper(torch.optim.SGD(model.parameters(), lr=1.0))


def changed(before: SPOS, after: SPOS) -> set:
    return {name for name, p in after.named_parameters()
            if not torch.equal(p, before.get_parameter(name))}


def test_a_step_trains_one_path_and_leaves_the_other_candidates_alone():
    MessageHub.get_instance('spos_step').update_info('seed', 3)
    model, start = tiny_spos(), tiny_spos()
    subnet = model.step_subnets()[0]
    model.train_step(batches()[0], plain_sgd(model))
    assert int(model.step_count) == 1 and model.current_subnet == subnet
    updated = {name.split('.candidates.')[1].split('.')[0] for name in changed(start, model)
               if '.candidates.' in name}
    assert updated == set(subnet.values())
    assert model.step_subnets() != [subnet] or len(set(subnet.values())) == 1


def test_sampling_follows_the_run_seed_and_the_step():
    hub = MessageHub.get_instance('spos_seed')

    def sequence(seed: int) -> list:
        hub.update_info('seed', seed)
        model = tiny_spos()
        paths = []
        for _ in range(8):
            paths.append(model.step_subnets()[0])
            model.step_count += 1
        return paths

    first = sequence(1)
    assert sequence(1) == first  # every rank, and a resumed run, draw the same paths
    assert len({str(path) for path in first}) > 1 and sequence(2) != first


def test_fair_sampling_trains_every_candidate_in_one_step():
    MessageHub.get_instance('spos_fair').update_info('seed', 0)
    model, start = tiny_spos(fair=True), tiny_spos()
    assert len(model.step_subnets()) == 4
    model.train_step(batches()[0], plain_sgd(model))
    candidates = {name.split('.candidates.')[1].split('.')[0] for name in changed(start, model)
                  if '.candidates.' in name}
    assert candidates == {'shuffle_3x3', 'shuffle_5x5', 'shuffle_7x7', 'shuffle_xception'}


def test_subnet_interface_for_the_search(tmp_path):
    model = tiny_spos()
    small = model.mutator.min_subnet()
    model.set_subnet(small)
    low = model.flops_params()
    model.set_subnet(model.mutator.max_subnet())
    assert low.flops < model.flops_params().flops
    path = tmp_path / 'subnet.yaml'
    model.export_subnet().dump(path)
    model.set_subnet(small)
    model.set_subnet(path)
    assert model.current_subnet == model.mutator.max_subnet()
    with pytest.raises(ValueError, match="unknown mutable 'backbone.nope'"):
        model.set_subnet(FixedSubnet({'backbone.nope': 'shuffle_3x3'}))
    assert remaining_mutables(model.architecture)  # the supernet keeps its mutables


def ddp_worker(rank: int, store: str, fair: bool, state: dict, result: str) -> None:
    # A file store, not a TCP port: nothing to collide with on a shared machine.
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank,
                            world_size=WORLD_SIZE, timeout=timedelta(seconds=120))
    try:
        MessageHub.get_instance('spos_ddp').update_info('seed', 7)
        model = tiny_spos(fair)
        model.load_state_dict(state)
        wrapper = SPOSDDP(module=model, device_ids=None)
        wrapper.train_step(batches()[rank], plain_sgd(model))
        if rank == 0:
            torch.save({name: p.detach() for name, p in model.named_parameters()}, result)
        del wrapper  # free the DDP reducer while its process group is alive
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize('fair', [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=['uniform', 'fair'])  # the default tier's one multi-process run
def test_ddp_step_applies_the_mean_of_the_ranks_gradients(tmp_path, fair):
    MessageHub.get_instance('spos_ddp_main').update_info('seed', 7)
    start = tiny_spos(fair)
    state = copy.deepcopy(start.state_dict())
    steps = []  # each rank's step alone: with SGD at lr 1, minus its gradient
    for batch in batches():
        model = tiny_spos(fair)
        model.load_state_dict(state)
        model.train_step(batch, plain_sgd(model))
        steps.append({name: p.detach() - start.get_parameter(name)
                      for name, p in model.named_parameters()})
    result = tmp_path / 'rank0.pth'
    mp.spawn(ddp_worker, args=(str(tmp_path / 'store'), fair, state, str(result)),
             nprocs=WORLD_SIZE)
    trained = torch.load(result)
    for name, p in start.named_parameters():
        expected = p.detach() + (steps[0][name] + steps[1][name]) / 2
        assert torch.allclose(trained[name], expected, atol=1e-6), name
    unused = [n for n in trained if torch.equal(steps[0][n], torch.zeros_like(steps[0][n]))]
    assert fair or unused  # a single path leaves candidates untouched, under DDP too


def test_ddp_wrapper_refuses_other_models():
    with pytest.raises(TypeError, match='SPOSDDP wraps a SPOS or DARTS model'):
        SPOSDDP(module=torch.nn.Linear(2, 2))


def test_gradient_accumulation_is_refused_not_ignored():
    # the step runs its passes and steps itself: accumulative_counts would be ignored
    model = tiny_spos()
    accumulating = OptimWrapper(torch.optim.SGD(model.parameters(), lr=1.0),
                                accumulative_counts=2)
    with pytest.raises(ValueError, match='SPOS steps the optimizer itself on every batch: '
                       'optim_wrapper.accumulative_counts must be 1, got 2'):
        model.train_step(batches()[0], accumulating)


@pytest.mark.parametrize('value', ['no', 'False', 1, None])
def test_fair_sampling_must_be_a_bool(value):
    # bool('no') is True: a string from a config turned fair sampling on, silently
    with pytest.raises(TypeError) as err:
        SPOS(ARCH, fair_sampling=value, input_shape=(3, 8, 8))
    assert str(err.value) == (f'SPOS: fair_sampling must be True or False, got {value!r} '
                              f'({type(value).__name__})')
    assert SPOS(ARCH, fair_sampling=True, input_shape=(3, 8, 8)).fair_sampling is True
