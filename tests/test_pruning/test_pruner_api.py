"""StructurePruner API: spaces, subnets and their validation, masks, bins, registry."""
import copy
import io
import pickle

import pytest
import torch
import torch.nn as nn

from razorlib.pruning import L1NormPruner, RatioPruner, remove_masks
from razorlib.registry import PRUNERS


class Net(nn.Module):
    """conv1 -> group conv (groups=4) -> conv3 -> global pool -> fc."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.gconv = nn.Conv2d(16, 16, 3, padding=1, groups=4)
        self.conv3 = nn.Conv2d(16, 12, 1)
        self.fc = nn.Linear(12, 5)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        return self.fc(torch.relu(self.conv3(torch.relu(self.gconv(x)))).mean((2, 3)))


X = torch.randn(2, 3, 8, 8)


def prepared(cls=L1NormPruner, **kwargs):
    torch.manual_seed(0)
    model = Net().eval()
    pruner = cls(**kwargs)
    pruner.prepare_from_supernet(model, X)
    return model, pruner


def test_channel_spaces_and_space_ids():
    _, pruner = prepared()
    spaces = pruner.channel_spaces
    assert {k: v.numel() for k, v in spaces.items()} == {'conv1': 4, 'gconv': 4, 'conv3': 12}
    assert pruner.get_space_id('bn1') == 'conv1'
    assert pruner.get_space_id('conv3') == 'conv3'
    assert pruner.get_space_id('fc') is None


def test_masks_are_buffers_that_follow_the_subnet():
    model, pruner = prepared()
    assert model.conv1.out_mask.shape == (16, 1, 1) and model.gconv.in_mask.shape == (16, 1, 1)
    assert model.fc.in_mask.shape == (12, )  # channels-last: broadcast on the last dim
    keep = torch.tensor([True, False, True, True])
    pruner.set_subnet({'conv1': keep})
    expected = keep.repeat(4).float()
    for mask in (model.conv1.out_mask, model.bn1.out_mask, model.gconv.in_mask):
        assert torch.equal(mask.flatten(), expected)
    assert {'conv1.out_mask', 'conv1.in_mask', 'bn1.out_mask', 'gconv.in_mask'} <= \
        set(model.state_dict())
    assert set(pruner.current_subnet) == {'conv1', 'gconv', 'conv3'}


def test_masked_model_copies_pickles_and_round_trips_its_state_dict():
    model, pruner = prepared()
    pruner.set_subnet(pruner.sample_subnet())
    with torch.no_grad():
        expected = model(X)
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        with torch.no_grad():
            assert torch.equal(clone(X), expected)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    fresh, fresh_pruner = prepared()
    fresh.load_state_dict(torch.load(io.BytesIO(buffer.getvalue())))
    with torch.no_grad():
        assert torch.equal(fresh(X), expected)


def test_remove_masks_restores_the_original_model():
    model, pruner = prepared()
    with torch.no_grad():
        dense = model(X)
    pruner.set_subnet(pruner.sample_subnet())
    with torch.no_grad():
        assert not torch.equal(model(X), dense)
    remove_masks(model)
    with torch.no_grad():
        assert torch.equal(model(X), dense)
    assert not any('mask' in k for k in model.state_dict())
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


class KeywordNet(Net):
    """Net calling its layers with the input by keyword."""

    def forward(self, x):
        x = torch.relu(self.bn1(input=self.conv1(input=x)))
        x = torch.relu(self.conv3(input=torch.relu(self.gconv(input=x))))
        return self.fc(input=x.mean((2, 3)))


def test_layers_called_with_their_input_by_keyword_are_masked_as_sliced():
    torch.manual_seed(0)
    model = KeywordNet().eval()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    pruner.set_subnet(pruner.sample_subnet())
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    with torch.no_grad():
        torch.testing.assert_close(model(X), slim(X))
    remove_masks(model)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize('subnet,message', [
    ({'nope': torch.ones(4)}, "unknown space id 'nope'"),
    ({'fc': torch.ones(5)}, "unknown space id 'fc' \\(it is frozen\\)"),
    ({'conv3': torch.ones(5)}, "space 'conv3': mask has 5 entries, expected 12"),
    ({'conv1': torch.ones(7)}, "expected 4 \\(or 16, one per output channel of conv1\\)"),
    ({'conv3': torch.zeros(12)}, "space 'conv3': the mask prunes every channel"),
    ({'conv1': torch.tensor([1, 1, 1, 1] + [0, 1, 1, 1] * 3)},
     "keeps channel 0 but prunes channel 4.*gconv is a group conv \\(groups=4\\)"),
])
def test_invalid_subnets_raise_before_anything_changes(subnet, message):
    model, pruner = prepared()
    pruner.set_subnet({'conv3': torch.arange(12) < 6})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        pruner.set_subnet(subnet)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_full_width_mask_of_a_bound_group_is_accepted():
    model, pruner = prepared()
    pruner.set_subnet({'conv1': torch.tensor([1, 1, 0, 1] * 4)})
    assert pruner.current_subnet['conv1'].tolist() == [True, True, False, True]


def test_ratio_pruner_keeps_a_prefix_and_samples_its_ratios():
    model, pruner = prepared(RatioPruner, ratios=(0.25, 0.5))
    for _ in range(5):
        subnet = pruner.sample_subnet()
        for gid, keep in subnet.items():
            count = int(keep.sum())
            assert keep[:count].all() and not keep[count:].any()
            assert count in {max(1, round(r * keep.numel())) for r in (0.25, 0.5)}
    pruner.set_min_channel()
    assert {k: int(v.sum()) for k, v in pruner.current_subnet.items()} == \
        {'conv1': 1, 'gconv': 1, 'conv3': 3}
    pruner.set_max_channel()
    assert all(v.all() for v in pruner.current_subnet.values())


def test_l1_pruner_keeps_the_largest_channels_of_the_group():
    model, pruner = prepared(ratio=0.5)
    with torch.no_grad():
        model.conv3.weight.mul_(0.01)
        model.conv3.weight[[2, 7, 9, 10, 11, 5]] *= 1000
        model.fc.weight.fill_(0.01)
    keep = pruner.sample_subnet()['conv3']
    assert keep.nonzero().flatten().tolist() == [2, 5, 7, 9, 10, 11]


def test_l1_score_sums_producers_and_consumers():
    model, pruner = prepared(ratio=0.25)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(0.01)
        model.fc.weight[:, 4] = 10.0   # only the consumer says channel 4 matters
    keep = pruner.sample_subnet()['conv3']
    assert keep[4] and int(keep.sum()) == 3


def test_uniform_and_per_space_ratios():
    model, pruner = prepared(RatioPruner)
    uniform = pruner.subnet_at(0.5)
    assert {k: int(v.sum()) for k, v in uniform.items()} == {'conv1': 2, 'gconv': 2, 'conv3': 6}
    assert int(pruner.subnet_at({'conv3': 0.25})['conv3'].sum()) == 3


def test_channel_bins():
    model, pruner = prepared(RatioPruner)
    bins = pruner.get_max_channel_bins(max_channel_bins=4)
    assert set(bins) == {'conv1', 'gconv', 'conv3'} and bins['conv3'].tolist() == [1] * 4
    bins['conv3'][2:] = 0
    pruner.set_channel_bins(bins, 4)
    assert pruner.current_subnet['conv3'].tolist() == [True] * 6 + [False] * 6


def test_pruners_build_from_config():
    pruner = PRUNERS.build(dict(type='RatioPruner', ratios=(0.5, 1.0),
                                except_start_keys=['fc']))
    assert isinstance(pruner, RatioPruner) and pruner.except_start_keys == ('fc', )
    assert isinstance(PRUNERS.build(dict(type='L1NormPruner', ratio=0.3)), L1NormPruner)
    with pytest.raises(ValueError, match=r'ratios must be in \(0, 1\]'):
        RatioPruner(ratios=(0.0, 1.5))


def test_using_a_pruner_before_prepare_is_a_clear_error():
    with pytest.raises(RuntimeError, match='prepare_from_supernet'):
        L1NormPruner().sample_subnet()


def test_prune_one_call_leaves_the_original_untouched():
    import razorlib
    model = Net().eval()
    before = copy.deepcopy(model.state_dict())
    slim = razorlib.prune(model, X, ratio=0.5)
    assert slim.conv3.out_channels == 6 and slim.fc.in_features == 6
    assert slim.gconv.groups == 4 and slim.gconv.in_channels == 8
    assert model.conv3.out_channels == 12
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert slim(X).shape == (2, 5)


class HardCoded(Net):
    """Its code hard-codes conv3's width: ``view(-1, 12)``."""

    def forward(self, x):
        y = torch.relu(self.conv3(torch.relu(self.gconv(self.conv1(x)))))
        return self.fc(y.mean((2, 3)).view(-1, 12))


def test_groups_the_code_cannot_follow_are_found_and_frozen():
    import razorlib
    model = HardCoded().eval()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    assert set(pruner.channel_spaces) == {'conv1', 'gconv'}
    (reason, ) = pruner.groups.groups['conv3'].frozen_reasons
    assert reason.kind == 'runtime' and 'RuntimeError' in reason.message
    slim = razorlib.prune(HardCoded().eval(), X, ratio=0.5)
    assert slim.conv3.out_channels == 12 and slim.gconv.out_channels == 8


def test_unfollowable_groups_raise_under_strict():
    from razorlib.tracing import TracingError
    with pytest.raises(TracingError, match=r'\[runtime\] conv3: the model code fails when '
                       r'these channels are pruned: RuntimeError'):
        L1NormPruner(strict=True).prepare_from_supernet(HardCoded(), X)


def test_prune_reports_a_model_that_cannot_follow_new_widths_without_verify():
    import razorlib
    # the view(-1, 12) leaves fc the wrong width: the error names where it surfaced
    with pytest.raises(RuntimeError, match=r"the pruned model does not run in 'fc' \(Linear\): "
                       r'mat1 and mat2 .*except_start_keys'):
        razorlib.prune(HardCoded(), X, ratio=0.5, verify=False)
