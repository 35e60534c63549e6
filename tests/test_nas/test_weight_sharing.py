"""What an SPOS step does to the weights its subnet does not use, as the MBConv config and
docs/nas.md say: a candidate op that did not run has no gradient and does not move; the
unused kernel ring and hidden channels of a shared DynamicMBConv weight have a gradient
of exactly 0, so SGD's momentum and weight decay still move them (as in OFA)."""
import torch
from mmengine.optim import OptimWrapper

from razorlib.algorithms import SPOS

BLOCK, OP = 'backbone.stages.0.0', 'backbone.stages.0.1'
FULL = {f'{BLOCK}.kernel_size': 7, f'{BLOCK}.expand_ratio': 6, OP: 'mbconv',
        f'{OP}.candidates.mbconv.kernel_size': 7, f'{OP}.candidates.mbconv.expand_ratio': 6}
SMALL = {f'{BLOCK}.kernel_size': 3, f'{BLOCK}.expand_ratio': 3, OP: 'skip'}
LR = 0.1


def mbconv_spos() -> SPOS:
    torch.manual_seed(0)
    return SPOS(dict(type='ImageClassifier', head=dict(type='LinearClsHead', num_classes=10),
                     backbone=dict(type='SearchableMobileNet', arch_setting=[(16, 2, 1)],
                                   stem_channels=8, first_channels=None, last_channels=None,
                                   stem='cifar')), input_shape=(3, 8, 8))


def step(model: SPOS, optimizer: OptimWrapper, subnet: dict) -> None:
    generator = torch.Generator().manual_seed(0)
    data = dict(inputs=torch.randn(4, 3, 8, 8, generator=generator),
                data_samples=torch.randint(0, 10, (4, ), generator=generator))
    model.step_subnets = lambda: [subnet]
    model.train_step(data, optimizer)


def unused(weight: torch.Tensor) -> dict:
    """The parts of the 7x7 depthwise weight (48 hidden channels) that kernel 3 at expand
    ratio 3 (24 channels) does not read."""
    ring = torch.ones(7, 7, dtype=torch.bool)
    ring[2:5, 2:5] = False
    return dict(ring=weight[:24, :, ring].detach().clone(),
                channels=weight[24:].detach().clone())


def test_weight_decay_moves_the_unused_slices_not_the_op_that_did_not_run():
    model = mbconv_spos()
    decay = 0.01
    step(model, OptimWrapper(torch.optim.SGD(model.parameters(), lr=LR, weight_decay=0)), FULL)
    weight = model.architecture.get_parameter(f'{BLOCK}.depthwise.conv.weight')
    skipped = model.architecture.get_submodule(f'{OP}.candidates.mbconv')
    before, idle = unused(weight), [p.detach().clone() for p in skipped.parameters()]
    grads = []
    weight.register_hook(grads.append)
    step(model, OptimWrapper(torch.optim.SGD(model.parameters(), lr=LR, weight_decay=decay)),
         SMALL)
    assert torch.count_nonzero(unused(grads[0])['ring']) == 0  # a gradient, of zeros
    assert torch.count_nonzero(unused(grads[0])['channels']) == 0
    for part, value in unused(weight).items():
        torch.testing.assert_close(value, before[part] * (1 - LR * decay))
    assert all(p.grad is None for p in skipped.parameters())
    assert all(torch.equal(p, q) for p, q in zip(skipped.parameters(), idle))


def test_momentum_carries_the_unused_slices_on_at_its_rate():
    model = mbconv_spos()
    optimizer = OptimWrapper(torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9))
    weight = model.architecture.get_parameter(f'{BLOCK}.depthwise.conv.weight')
    start = unused(weight)
    step(model, optimizer, FULL)  # moves by -lr * g
    first = unused(weight)
    step(model, optimizer, SMALL)  # gradient 0 there: moves by -lr * 0.9 * g
    second = unused(weight)
    for part in start:
        assert torch.count_nonzero(first[part] - start[part]) > 0
        torch.testing.assert_close(second[part] - first[part],
                                   0.9 * (first[part] - start[part]))
