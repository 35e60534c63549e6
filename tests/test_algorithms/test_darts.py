"""DARTS: alternating architecture / weight steps through an OptimWrapperDict, argmax
subnet, and DDP on CPU."""
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from mmengine.optim import OptimWrapper, OptimWrapperDict

from razorlib.algorithms import DARTS, SPOSDDP
from razorlib.nas import ArchWeightOptimWrapperConstructor, DiffMutableOP
from razorlib.registry import OPTIM_WRAPPER_CONSTRUCTORS

ARCH = dict(type='ImageClassifier',
            backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 2, 2)],
                          stem_channels=8, stem='cifar', last_channels=None,
                          mutable_cfg=dict(type='DiffMutableOP')),
            head=dict(type='LinearClsHead', num_classes=10))
OPTIM = dict(architecture=dict(optimizer=dict(type='SGD', lr=0.1)),
             mutator=dict(optimizer=dict(type='Adam', lr=0.05)))


def tiny_darts() -> DARTS:
    torch.manual_seed(0)
    return DARTS(ARCH, input_shape=(3, 8, 8))


def batch(size: int = 8) -> dict:
    generator = torch.Generator().manual_seed(1)
    return dict(inputs=torch.rand(size, 3, 8, 8, generator=generator),
                data_samples=torch.randint(0, 10, (size, ), generator=generator))


def wrappers(model: DARTS) -> OptimWrapperDict:
    constructor = OPTIM_WRAPPER_CONSTRUCTORS.build(
        dict(type='ArchWeightOptimWrapperConstructor', optim_wrapper_cfg=OPTIM))
    return constructor(model)


def test_the_groups_split_architecture_parameters_from_weights():
    model = tiny_darts()
    groups = model.parameter_groups()
    edges = [m for m in model.modules() if isinstance(m, DiffMutableOP)]
    assert len(edges) == 2 and groups['mutator'] == [e.arch_param for e in edges]
    assert len(groups['architecture']) + 2 == len(list(model.parameters()))
    built = wrappers(model)
    assert type(built['mutator'].optimizer).__name__ == 'Adam'


def test_a_step_moves_both_groups_each_on_its_own_half_of_the_batch():
    model = tiny_darts()
    alphas = [p.detach().clone() for p in model.parameter_groups()['mutator']]
    head = model.architecture.head.fc.weight.detach().clone()
    log = model.train_step(batch(), wrappers(model))
    assert set(log) == {'loss', 'loss_arch'} and log['loss'] != log['loss_arch']
    moved = [p for p, a in zip(model.parameter_groups()['mutator'], alphas)
             if not torch.equal(p, a)]
    assert len(moved) == 2 and not torch.equal(model.architecture.head.fc.weight, head)
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_the_architecture_step_uses_only_the_second_batch():
    model, twin = tiny_darts(), tiny_darts()
    weights, arch = batch(), dict(batch(8), inputs=torch.rand(8, 3, 8, 8))
    model.train_step([weights, arch], wrappers(model))
    twin_wrappers = wrappers(twin)
    twin._step(twin, arch, twin_wrappers['mutator'])
    for p, q in zip(model.parameter_groups()['mutator'], twin.parameter_groups()['mutator']):
        assert torch.allclose(p, q)


def test_the_derived_subnet_is_the_argmax_of_every_edge():
    model = tiny_darts()
    edges = model.edges
    with torch.no_grad():
        for edge, winner in zip(edges.values(), (2, 0)):
            edge.arch_param.zero_()
            edge.arch_param[winner] = 1.0
    subnet = model.export_subnet().choices
    assert [subnet[k] for k in edges] == [edges[k].choices[i] for k, i in zip(edges, (2, 0))]
    weights = model.arch_weights()  # the softmax of each edge's architecture parameters
    assert list(weights) == list(edges)
    for (key, edge), winner in zip(edges.items(), (2, 0)):
        assert sum(weights[key].values()) == pytest.approx(1.0)
        assert max(weights[key], key=weights[key].get) == edge.choices[winner]


def test_misconfigurations_are_named():
    model = tiny_darts()
    with pytest.raises(TypeError, match="OptimWrapperDict of 'architecture' and 'mutator'"):
        model.train_step(batch(), OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1)))
    with pytest.raises(ValueError, match=r"parameter groups \['architecture', 'mutator'\]"):
        ArchWeightOptimWrapperConstructor(dict(weights=OPTIM['architecture']))(model)
    with pytest.raises(ValueError, match='no DiffMutableOP'):
        DARTS(dict(ARCH, backbone=dict(ARCH['backbone'], mutable_cfg=None)))
    with pytest.raises(ValueError, match='batch size >= 2'):
        model.train_step(batch(1), wrappers(model))


def ddp_worker(rank: int, store: str, state: dict, result: str) -> None:
    # A file store, not a TCP port: nothing to collide with on a shared machine.
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank, world_size=2,
                            timeout=timedelta(seconds=120))
    try:
        model = tiny_darts()
        model.load_state_dict(state)
        wrapper = SPOSDDP(module=model, device_ids=None)
        generator = torch.Generator().manual_seed(10 + rank)  # each rank its own data
        data = dict(inputs=torch.rand(8, 3, 8, 8, generator=generator),
                    data_samples=torch.randint(0, 10, (8, ), generator=generator))
        wrapper.train_step(data, wrappers(model))
        torch.save({name: p.detach() for name, p in model.named_parameters()},
                   f'{result}.{rank}')
        del wrapper  # free the DDP reducer while its process group is alive
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # a multi-process run
def test_under_ddp_both_steps_keep_the_ranks_identical(tmp_path):
    start = tiny_darts()
    state = {k: v.clone() for k, v in start.state_dict().items()}
    result = str(tmp_path / 'params')
    mp.spawn(ddp_worker, args=(str(tmp_path / 'store'), state, result), nprocs=2)
    ranks = [torch.load(f'{result}.{rank}') for rank in range(2)]
    alphas = {name for name, _ in start.named_parameters() if 'arch_param' in name}
    assert alphas
    for name, p in start.named_parameters():
        assert torch.equal(ranks[0][name], ranks[1][name]), name  # gradients all-reduced
    moved = [n for n, p in start.named_parameters() if not torch.equal(ranks[0][n], p)]
    assert alphas <= set(moved) and len(moved) > len(alphas)  # both groups stepped


def test_gradient_accumulation_is_refused_not_ignored():
    # each step zeroes the other group, which would drop its accumulated gradients
    model = tiny_darts()
    constructor = OPTIM_WRAPPER_CONSTRUCTORS.build(dict(
        type='ArchWeightOptimWrapperConstructor',
        optim_wrapper_cfg=dict(OPTIM, mutator=dict(OPTIM['mutator'], accumulative_counts=2))))
    with pytest.raises(ValueError, match='DARTS steps the optimizer itself on every batch: '
                       'optim_wrapper.mutator.accumulative_counts must be 1, got 2'):
        model.train_step(batch(), constructor(model))
