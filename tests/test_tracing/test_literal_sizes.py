"""Which channels the model's code may size by hand (``tracing/literal_sizes.py``).

Each model below has one place between ``conv`` and ``head``; the groups that place makes
size-dependent are exactly the ones a pruned run has to check.  (Splits and slices with
literal bounds on the channel dim are frozen by their rules already, see
``test_shape_rules.py``.)
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import Traced
from razorlib.tracing.literal_sizes import ReadSize, SizeWatch

X = torch.randn(2, 3, 8, 8)


class Probe(nn.Module):
    """conv (8 channels) -> ``step`` -> a 1x1 conv head (4 channels) -> pooled output."""

    def __init__(self, step, head_in: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(head_in, 4, 1)
        self.step = step
        self.width = 8

    def forward(self, x):
        return self.head(self.step(self, self.conv(x))).mean((2, 3))


class Flat(nn.Module):
    """conv (8 channels) -> global pool -> ``step`` (flatten) -> fc."""

    def __init__(self, step):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)
        self.step = step

    def forward(self, x):
        return self.fc(self.step(self, F.adaptive_avg_pool2d(self.conv(x), 1)))


def _assert_width(m, y):
    assert y.shape[1] == m.width
    return y


def _tail_batch_norm(m, y):
    return F.batch_norm(y, torch.zeros(m.width), torch.ones(m.width))


SIZED_BY_CODE = {
    'view with a literal channel count': lambda m, y: y.view(y.shape[0], m.width, -1).view_as(y),
    'split into a literal width': lambda m, y: torch.cat(y.split(m.width // 2, 1)[::-1], 1),
    'a size read by the code': _assert_width,
    'an operand built with a literal size': lambda m, y: y + torch.ones(1, m.width, 1, 1),
    'a norm no module owns': _tail_batch_norm,  # (a layer or group norm freezes)
    'an expand to literal sizes': lambda m, y: y * y.mean((2, 3), keepdim=True).expand(
        2, m.width, 8, 8),
}

FOLLOWS_CHANNELS = {
    'chunk': lambda m, y: torch.cat(y.chunk(2, 1)[::-1], 1),
    'expand of -1 channels': lambda m, y: y * y.mean((2, 3), keepdim=True).expand(
        -1, -1, 8, 8),
    'expand_as': lambda m, y: y * y.mean((2, 3), keepdim=True).expand_as(y),
    'permute': lambda m, y: y.permute(0, 2, 3, 1).relu().permute(0, 3, 1, 2),
    'a scalar': lambda m, y: y * 2 + torch.tensor(1.0),
    'a zero map of its shape': lambda m, y: y + torch.zeros_like(y).sum(),
}


def _no_grad_mean(m, y):
    with torch.no_grad():
        scale = y.mean()
    return y * scale


#: Calls that take the channels with autograd history and return tensors without any:
#: the walk cannot see what they compute from them (one number each, so no operand of a
#: size of its own gives them away).
READ_OUTSIDE_AUTOGRAD = {
    'detach': lambda m, y: y * y.detach().mean(1).mean(),
    'no_grad': _no_grad_mean,
    '.data': lambda m, y: y * y.data.amin(),
    'a comparison': lambda m, y: y * (y > 0).sum(),
    'an argmax over the channels': lambda m, y: y * y.argmax(1).max(),
}


@pytest.mark.parametrize('name', SIZED_BY_CODE)
def test_channels_that_reach_code_sized_ops_are_size_dependent(name):
    traced = Traced(Probe(SIZED_BY_CODE[name]), X)
    assert traced.groups.size_dependent == ['conv']


@pytest.mark.parametrize('name', READ_OUTSIDE_AUTOGRAD)
def test_channels_read_outside_autograd_are_size_dependent(name):
    traced = Traced(Probe(READ_OUTSIDE_AUTOGRAD[name]), X)
    assert traced.group_of('conv').prunable
    assert traced.groups.size_dependent == ['conv']


@pytest.mark.parametrize('name', FOLLOWS_CHANNELS)
def test_ops_that_follow_the_channels_are_not(name):
    traced = Traced(Probe(FOLLOWS_CHANNELS[name]), X)
    assert traced.group_of('conv').prunable
    assert traced.groups.size_dependent == []


@pytest.mark.parametrize('step, dependent', [
    (lambda m, y: torch.flatten(y, 1), []),
    (lambda m, y: y.flatten(1), []),
    (lambda m, y: nn.Flatten()(y), []),
    (lambda m, y: y.view(y.size(0), -1), []),
    (lambda m, y: y.reshape(len(y), -1), []),
    (lambda m, y: y.view(-1, 8), ['conv']),
    (lambda m, y: y.reshape(y.shape[0], 8), ['conv']),
    (lambda m, y: y.view(y.size(0), y.size(1)), ['conv']),
])
def test_flatten_into_a_linear(step, dependent):
    assert Traced(Flat(step), X).groups.size_dependent == dependent


def test_reads_of_other_dims_do_not_count():
    def step(m, y):
        n, h = y.size(0), y.size(-1)
        return y * (n * h / len(y))
    assert Traced(Probe(step), X).groups.size_dependent == []


def test_the_watch_leaves_no_mode_behind():
    Traced(Probe(_assert_width), X)
    assert not torch.overrides._get_current_function_mode_stack()


class ChannelsLast(nn.Module):
    """conv -> NHWC -> Linear (a view, a matrix product and a view inside) -> NCHW."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 6)
        self.head = nn.Conv2d(6, 4, 1)

    def forward(self, x):
        y = self.fc(self.conv(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.head(y).mean((2, 3))


def test_views_inside_a_linear_on_tokens_follow_the_channels():
    traced = Traced(ChannelsLast(), X)
    assert set(traced.groups.prunable) == {'conv', 'fc'}
    assert traced.groups.size_dependent == []


class LayerNorm2d(nn.LayerNorm):
    """ConvNeXt's channels-first LayerNorm: ``F.layer_norm`` between two permutes, with
    the module's own ``normalized_shape`` (or, in a faulty copy, a literal)."""

    literal = False

    def forward(self, x):
        shape = (8, ) if self.literal else self.normalized_shape
        x = F.layer_norm(x.permute(0, 2, 3, 1), shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


@pytest.mark.parametrize('literal, dependent', [(False, []), (True, ['conv'])])
def test_a_layer_norm_called_with_its_modules_shape_follows_the_channels(literal, dependent):
    probe = Probe(lambda m, y: m.norm(y))
    probe.norm = LayerNorm2d(8)
    probe.norm.literal = literal
    traced = Traced(probe, X)
    assert traced.groups.size_dependent == dependent
    assert traced.group_of('conv').norms == ['norm']


class LiteralGroupNorm(nn.GroupNorm):
    """A GroupNorm whose forward passes a literal group count and scales the result."""

    def forward(self, x):
        return F.group_norm(x, 8, self.weight, self.bias) * 2


def test_a_group_norm_with_a_literal_group_count_is_size_dependent():
    probe = Probe(lambda m, y: m.gn(y))
    probe.gn = LiteralGroupNorm(8, 8)
    traced = Traced(probe, X)
    assert traced.group_of('conv').norms == ['gn']
    assert traced.groups.size_dependent == ['conv']


def test_a_view_tells_the_sizes_the_code_gave_from_those_it_computed_from_a_read():
    """Sizes read from a tensor, and integer arithmetic on them, come back as
    ``ReadSize``: a view's ``c // g`` follows the widths, its literal ``g`` does not.
    Arithmetic that leaves ints (``int(c / 2)``) gives a size of the code's own."""
    x = torch.randn(2, 8, 3, requires_grad=True) * 1
    with SizeWatch() as watch:
        b, c, n = x.shape
        views = [x.view(b, 2, c // 2, n), x.view(x.size(0), c // 2, 2, n),
                 x.view(b, int(c / 2), 2, n), x.reshape(-1, 2, 4, n)]
    assert type(c) is ReadSize and c == 8 and hash(c) == hash(8) and str(c) == '8'
    assert [watch.requested[v.grad_fn] for v in views] == [
        (2, 2, 4, 3), (2, 4, 2, 3), (2, 4, 2, 3), (-1, 2, 4, 3)]
    assert all(type(s) is int for v in views for s in watch.requested[v.grad_fn])
    assert [watch.own_sizes[v.grad_fn] for v in views] == [
        (False, True, False, False), (False, False, True, False),
        (False, True, True, False), (False, True, True, False)]
