"""Depth pruning of CNN stages: residual blocks found, ranked and removed; the cut
repeats on a freshly built model."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from razorlib.models import ResNet
from razorlib.pruning.depth import (block_importance, prune_depth, remove_blocks,
                                    residual_blocks, select_blocks)


def _resnet(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return ResNet(depth=18, stem='cifar', num_classes=10, base_channels=8).eval()


def _batches(count: int = 2):
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(2, 3, 16, 16, generator=generator) for _ in range(count)]


def _make_identity(block: nn.Module) -> None:
    """A BasicBlock whose residual branch adds nothing: relu(0 + x) is x after a ReLU."""
    nn.init.zeros_(block.conv2.bn.weight)
    nn.init.zeros_(block.conv2.bn.bias)


def test_only_blocks_with_an_identity_shortcut_are_candidates():
    net = _resnet()
    blocks = residual_blocks(net, _batches(1)[0])
    assert blocks == ['stages.0.0', 'stages.0.1', 'stages.1.1', 'stages.2.1', 'stages.3.1']
    assert residual_blocks(nn.Sequential(nn.Conv2d(3, 3, 1), nn.ReLU()),
                           torch.randn(1, 3, 4, 4)) == []


@pytest.mark.parametrize('metric', ['cosine', 'loss'])
def test_a_block_that_adds_nothing_goes_first_and_the_outputs_stay(metric):
    net = _resnet()
    _make_identity(net.stages[2][1])
    batches = _batches()
    with torch.no_grad():
        targets = {id(x): net(x) for x in batches}

    def loss_fn(model, x):  # distance to the full model's outputs: 0 only for no change
        return F.mse_loss(model(x), targets[id(x)])

    result = prune_depth(net, batches, num=1, metric=metric, loss_fn=loss_fn)
    assert result.removed == ['stages.2.1']
    assert min(result.importance, key=result.importance.get) == 'stages.2.1'
    assert result.importance['stages.2.1'] == pytest.approx(0, abs=1e-9)
    assert len(net.stages[2]) == 2 and len(result.model.stages[2]) == 1  # a copy was cut
    with torch.no_grad():
        torch.testing.assert_close(result.model(batches[0]), net(batches[0]))


def test_the_cut_repeats_on_a_fresh_model_before_loading_the_weights():
    net = _resnet()
    result = prune_depth(net, _batches(), ratio=0.4)
    assert len(result.removed) == 2
    fresh = remove_blocks(_resnet(seed=5), result.removed)
    fresh.load_state_dict(result.model.state_dict())
    x = _batches(1)[0]
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), result.model(x))


def test_importance_is_one_minus_the_cosine_of_input_and_output():
    block = nn.Sequential(nn.Linear(4, 4))
    model = nn.ModuleList([block])
    x = torch.randn(3, 4)

    class Run(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = model

        def forward(self, x):
            return self.blocks[0](x)

    importance = block_importance(Run(), [x], ['blocks.0'])
    with torch.no_grad():
        expected = (1 - F.cosine_similarity(x, block(x), dim=-1)).mean()
    assert importance['blocks.0'] == pytest.approx(float(expected), rel=1e-6)


def test_selection_and_removal_errors_name_the_fault():
    with pytest.raises(ValueError, match='one of them'):
        select_blocks({'a': 1.0}, num=1, ratio=0.5)
    with pytest.raises(ValueError, match='keep at least one'):
        select_blocks({'a': 1.0, 'b': 2.0}, num=2)
    with pytest.raises(ValueError, match="'fc'"):
        remove_blocks(_resnet(), ['fc'])
    with pytest.raises(ValueError, match="metric must be"):
        block_importance(_resnet(), _batches(1), ['stages.0.0'], metric='l2')


class _Residual(nn.Module):
    def __init__(self, in_place: bool = False):
        super().__init__()
        self.f, self.in_place = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)), in_place

    def forward(self, x):
        if self.in_place:
            x += self.f(x)
            return x
        return x + self.f(x)


class _PositionMLP(nn.Module):
    """Adds its input to a parameter inside its branch: no shortcut."""

    def __init__(self):
        super().__init__()
        self.pos, self.mlp = nn.Parameter(torch.randn(8)), nn.Sequential(nn.Linear(8, 8), nn.Tanh())

    def forward(self, x):
        return self.mlp(x + self.pos)


class _PositionConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos, self.conv = nn.Parameter(torch.randn(1, 8, 1, 1)), nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.conv(x + self.pos).relu()


class _ConvResidual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)

    def forward(self, x):
        return self.bn(x + self.conv(x)).relu()  # a norm and an activation after the sum


def test_an_addition_inside_a_branch_is_no_shortcut():
    torch.manual_seed(0)
    model = nn.Sequential(_PositionMLP(), _Residual()).eval()
    assert residual_blocks(model, torch.randn(4, 8)) == ['1']
    convs = nn.Sequential(_PositionConv(), _ConvResidual()).eval()
    assert residual_blocks(convs, torch.randn(1, 8, 6, 6)) == ['1']


@pytest.mark.parametrize('metric', ['cosine', 'loss'])
def test_a_block_that_adds_to_its_input_in_place_scores_as_one_that_does_not(metric):
    torch.manual_seed(0)
    in_place = nn.Sequential(_Residual(True), _Residual(True)).eval()
    plain = nn.Sequential(_Residual(), _Residual()).eval()
    plain.load_state_dict(in_place.state_dict())
    x = torch.randn(4, 8)
    scores = [block_importance(model, [x.clone()], ['0', '1'], metric,
                               loss_fn=lambda m, b: m(b.clone()).pow(2).mean())
              for model in (in_place, plain)]
    assert scores[0] == pytest.approx(scores[1]) and scores[1]['0'] != 0


@pytest.mark.parametrize('metric', ['cosine', 'loss'])
def test_a_block_that_changes_the_shape_is_refused_naming_it(metric):
    net = _resnet().eval()
    with pytest.raises(ValueError, match=r"block 'stages.1.0' maps a tensor of shape "
                       r'\(2, 8, 16, 16\) to \(2, 16, 8, 8\): only a block that keeps its '
                       r"input's shape"):
        prune_depth(net, _batches(), num=1, blocks=['stages.1.0', 'stages.1.1'], metric=metric,
                    loss_fn=lambda m, b: m(b).pow(2).mean())


class _KeywordBlock(_Residual):
    def forward(self, features):
        return features + self.f(features)


class _KeywordStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([_KeywordBlock(), _KeywordBlock()])

    def forward(self, x):
        for block in self.blocks:
            x = block(features=x)
        return x


def test_a_block_whose_input_is_not_found_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"block 'blocks.0': its input is neither its first "
                       r'positional argument nor hidden_states='):
        block_importance(_KeywordStack().eval(), [torch.randn(2, 8)], ['blocks.0'])
