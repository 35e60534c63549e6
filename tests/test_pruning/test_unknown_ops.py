"""``razorlib.prune`` around ops it does not know: one warning per call with the reasons
``strict=True`` raises on (before, the layers were left unpruned without a word)."""
import warnings

import pytest
import torch
import torch.nn as nn

import razorlib
from razorlib.tracing import TracingError

X = torch.randn(1, 3, 8, 8)


class Double(torch.autograd.Function):
    """A custom autograd op: its grad_fn (``DoubleBackward``) is in no rule table."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class Net(nn.Module):
    """a -> b -> op -> c -> op -> head, where ``op`` is the op under test."""

    def __init__(self, op):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1)
        self.c, self.head = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 4, 1)
        self.op = op

    def forward(self, x):
        return self.head(self.op(self.c(self.op(self.b(self.a(x))))))


def spectral(x):
    return torch.fft.irfft2(torch.fft.rfft2(x), s=x.shape[-2:])


OPS = {'FftR2CBackward0': spectral, 'DoubleBackward': Double.apply}


@pytest.mark.parametrize('grad_fn', sorted(OPS))
def test_unknown_op_warns_once_with_the_reasons_strict_raises_on(grad_fn):
    with pytest.raises(TracingError) as strict:
        razorlib.prune(Net(OPS[grad_fn]), X, strict=True)
    reason = str(strict.value).split('. Use strict=False')[0]
    assert reason.startswith(f'[unknown-op] {grad_fn}: ')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        slim = razorlib.prune(Net(OPS[grad_fn]), X)
    ours = [w for w in caught if 'razorlib.prune left' in str(w.message)]
    assert len(ours) == 1 and ours[0].filename == __file__
    message = str(ours[0].message)
    assert reason in message  # the same one line strict=True raises with
    assert '(left unpruned: b)' in message and '(left unpruned: c)' in message
    assert slim.b.out_channels == slim.c.out_channels == 8  # around the op: unpruned
    assert slim.a.out_channels == 4  # elsewhere: pruned


def test_a_model_razorlib_fully_understands_prunes_without_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        slim = razorlib.prune(Net(torch.relu), X)
    assert not [w for w in caught if 'razorlib.prune left' in str(w.message)]
    assert slim.b.out_channels == 4


class DetachedScale(nn.Module):
    """Scales by a parameter read outside autograd (``.data``): no node records the read."""

    def __init__(self):
        super().__init__()
        self.alpha = nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x):
        return x * self.alpha.data[:, None, None]


def test_a_parameter_read_outside_autograd_warns_naming_it():
    """Before, the pruned run froze b and c with a broadcast error naming no parameter,
    and ``verify=False`` sliced them, leaving a slim model that fails."""
    with pytest.raises(TracingError, match=r'^\[untracked\] MulBackward0: combines these '
                                           r'channels with op\.alpha, read outside autograd'):
        razorlib.prune(Net(DetachedScale()), X, strict=True)
    for verify in (True, False):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            slim = razorlib.prune(Net(DetachedScale()), X, verify=verify)
        (message, ) = [str(w.message) for w in caught if 'razorlib.prune left' in str(w.message)]
        assert message.count('with op.alpha, read outside autograd') == 2
        assert '(left unpruned: b)' in message and '(left unpruned: c)' in message
        assert (slim.a.out_channels, slim.b.out_channels, slim.c.out_channels) == (4, 8, 8)
