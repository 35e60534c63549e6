"""GroupNorm and LayerNorm subclasses with forwards of their own, pruned after a conv: the
masked supernet computes (and back-propagates) exactly what the slim model does."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from razorlib.layers import GroupNormKind, LayerNormKind
from razorlib.pruning import L1NormPruner
from razorlib.pruning.masks import OUT_MASK, add_masks, set_mask
from razorlib.utils import get_model_complexity


class GroupNorm32(nn.GroupNorm):
    """guided-diffusion's: normalises in float32 around the parent's forward."""

    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


class GroupNormAct(nn.GroupNorm):
    """timm's: the functional group norm, then an activation."""

    def __init__(self, num_groups, num_channels):
        super().__init__(num_groups, num_channels)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps))


class LayerNormAct2d(nn.LayerNorm):
    """timm's: a channels-first layer norm (permuted around ``F.layer_norm``), then an
    activation."""

    def __init__(self, num_channels):
        super().__init__(num_channels)
        self.act = nn.GELU()

    def forward(self, x):
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias,
                         self.eps).permute(0, 3, 1, 2)
        return self.act(x)


class ScaledGroupNorm(nn.GroupNorm):
    """A forward that may take a tensor besides its input (as mamba's fused add + norm
    takes ``residual=None``), which may carry channels that the masked output, rerun on
    the kept ones, would not slice."""

    def forward(self, x, scale=None):
        out = super().forward(x)
        return out if scale is None else out * scale


class LayerNorm2d(nn.LayerNorm):
    """mmpretrain's ``LN2d``: channels first by default, channels last when told; its
    ConvNeXt calls it with ``data_format='channel_last'``."""

    def forward(self, x, data_format='channel_first'):
        if data_format == 'channel_last':
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias,
                         self.eps)
        return x.permute(0, 3, 1, 2)


class ConvChannelsLastNorm(nn.Module):
    """A conv, then LayerNorm2d called channels last (as mmpretrain's ConvNeXt block does
    before its pointwise Linear layers), then a Linear."""

    def __init__(self, norm: LayerNorm2d):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.n = norm
        self.b = nn.Linear(8, 5)
        with torch.no_grad():
            self.n.weight.normal_()
            self.n.bias.normal_()

    def forward(self, x):
        return self.b(self.n(self.a(x).permute(0, 2, 3, 1), data_format='channel_last'))


class ConvNormConv(nn.Module):
    def __init__(self, norm: nn.Module):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.n = norm
        self.b = nn.Conv2d(8, 5, 1)
        with torch.no_grad():
            norm.weight.normal_()
            norm.bias.normal_()

    def forward(self, x):
        return self.b(self.n(self.a(x))).flatten(1)


NORMS = {
    'GroupNorm32': lambda: GroupNorm32(2, 8),
    'GroupNormAct': lambda: GroupNormAct(2, 8),
    'GroupNormAct-per-channel': lambda: GroupNormAct(8, 8),
    'LayerNormAct2d': lambda: LayerNormAct2d(8),
}


def _pruned(make_norm, make_model=ConvNormConv):
    """The masked model at half of ``a``'s channels, its slim model and the input."""
    torch.manual_seed(0)
    model = make_model(make_norm()).eval()
    x = torch.randn(2, 3, 6, 6)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    assert not pruner.groups.groups['a'].frozen
    pruner.set_subnet(pruner.subnet_at(0.5))
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert slim.a.out_channels == 4
    return model, slim, x


@pytest.mark.parametrize('norm', sorted(NORMS))
def test_masked_subclass_norm_computes_and_counts_what_the_slim_one_does(norm):
    model, slim, x = _pruned(NORMS[norm])
    with torch.no_grad():
        torch.testing.assert_close(model(x), slim(x), rtol=1e-5, atol=1e-6)
    masked, sliced = get_model_complexity(model, x), get_model_complexity(slim, x)
    assert (masked.flops, masked.params) == (sliced.flops, sliced.params)


@pytest.mark.parametrize('norm', ['GroupNorm32', 'LayerNormAct2d'])
def test_masked_subclass_norm_passes_the_slim_gradients_to_its_weights(norm):
    """The sliced copy holds the module's own weights, not new parameters: training the
    masked supernet trains them."""
    model, slim, x = _pruned(NORMS[norm])
    model(x).square().sum().backward()
    slim(x).square().sum().backward()
    kept = model.n.out_mask.flatten().bool()
    torch.testing.assert_close(model.n.weight.grad[kept], slim.n.weight.grad)
    torch.testing.assert_close(model.n.weight.grad[~kept], torch.zeros(4))


@pytest.mark.parametrize('kind, norm, keep', [
    (GroupNormKind(), GroupNorm32(2, 4), [1., 0., 1., 0.]),
    (LayerNormKind(), LayerNormAct2d(4), [0., 1., 1., 1.]),
])
def test_subclass_masked_output_is_its_forward_on_the_kept_channels(kind, norm, keep):
    keep = torch.tensor(keep).view(4, 1, 1)
    index = keep.flatten().nonzero().flatten()
    x = torch.randn(2, 4, 3, 3)
    sliced = copy.deepcopy(norm)
    kind.plan_slice('n', norm, {'out': index.tolist()}).apply(sliced)
    out = kind.masked_output(norm, x, norm(x), keep)
    torch.testing.assert_close(out[:, index], sliced(x[:, index]))
    assert not out[:, ~keep.flatten().bool()].any()


def test_a_subclass_norm_called_with_another_argument_reruns_with_it():
    """The masked output reruns the forward with the call's other arguments (it was
    frozen for having them, though the masked output is exact)."""
    model, slim, x = _pruned(lambda: LayerNorm2d(8), ConvChannelsLastNorm)
    with torch.no_grad():
        torch.testing.assert_close(model(x), slim(x), rtol=1e-5, atol=1e-6)


class ConvScaledNormConv(ConvNormConv):
    def forward(self, x):
        return self.b(self.n(self.a(x), torch.linspace(0.5, 1.5, 8).view(8, 1, 1))).flatten(1)


def test_subclass_norm_whose_forward_takes_more_than_its_input_is_frozen():
    torch.manual_seed(0)
    model = ConvScaledNormConv(ScaledGroupNorm(2, 8)).eval()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, torch.randn(2, 3, 6, 6))
    reasons = [str(reason) for reason in pruner.groups.groups['a'].frozen_reasons]
    assert any("n (ScaledGroupNorm)'s forward takes scale beside its input" in reason
               for reason in reasons), reasons


def test_layer_norm_over_several_dims_refuses_a_masked_output():
    norm = nn.LayerNorm((4, 3))
    x = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match='LayerNorm: only a LayerNorm over one dim'):
        LayerNormKind().masked_output(norm, x, norm(x), torch.tensor([1., 0., 1.]))


class FlagNorm(nn.GroupNorm):
    """A flag with a plain default, which a caller passes a tensor for."""

    def forward(self, x, gain=1.0):
        return super().forward(x) * gain


@pytest.mark.parametrize('gain, refused', [(torch.full((1, 4, 1, 1), 2.0), True),
                                           (torch.tensor(2.0), False)])
def test_a_masked_norm_called_with_another_tensor_is_refused_not_rerun(gain, refused):
    """A tensor of several values may carry the channels the rerun drops: a clear error,
    not a guess; a scalar passes on (the runtime check freezes a model whose extra tensor
    does carry them, so this guards the masks themselves)."""
    norm = FlagNorm(1, 4)
    add_masks(norm, GroupNormKind(), out_dim=-3, name='n')
    set_mask(norm, OUT_MASK, torch.tensor([True, True, False, True]))
    x = torch.randn(2, 4, 3, 3)
    if refused:
        with pytest.raises(ValueError, match=r'n \(FlagNorm\): its call passes a tensor '
                                             'besides its input'):
            norm(x, gain=gain)
    else:
        sliced = copy.deepcopy(norm)
        GroupNormKind().plan_slice('n', norm, {'out': [0, 1, 3]}).apply(sliced)
        torch.testing.assert_close(norm(x, gain=gain)[:, [0, 1, 3]],
                                   FlagNorm.forward(sliced, x[:, [0, 1, 3]], gain=gain))
