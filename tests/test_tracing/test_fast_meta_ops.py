"""FastMetaOps: shape-only kernels agree with torch's own meta kernels, errors included."""
import pytest
import torch
import torch.nn.functional as F

from razorlib.tracing.forward import FastMetaOps


def t(*shape):
    return torch.empty(shape, device='meta', requires_grad=True)


CASES = {
    'conv2d grouped, strided': lambda: F.conv2d(t(2, 8, 9, 9), t(16, 4, 3, 3), t(16),
                                                stride=2, padding=1, groups=2),
    'conv1d dilated': lambda: F.conv1d(t(1, 3, 20), t(5, 3, 3), dilation=2),
    'conv3d': lambda: F.conv3d(t(1, 2, 5, 6, 7), t(4, 2, 3, 1, 2), padding=(1, 0, 1)),
    'depthwise': lambda: F.conv2d(t(1, 6, 7, 7), t(12, 1, 3, 3), groups=6),
    'conv transpose': lambda: F.conv_transpose2d(t(1, 4, 5, 5), t(4, 3, 3, 3), stride=2,
                                                 padding=1, output_padding=1),
    'conv transpose grouped': lambda: F.conv_transpose2d(t(1, 4, 5, 5), t(4, 3, 3, 3),
                                                         groups=2),
    'channels-last conv': lambda: F.conv2d(
        t(1, 4, 6, 6).contiguous(memory_format=torch.channels_last), t(8, 4, 1, 1)),
    'batch norm': lambda: F.batch_norm(t(2, 4, 3, 3), torch.empty(4, device='meta'),
                                       torch.empty(4, device='meta'), t(4), t(4)),
    'batch norm, training, no affine': lambda: F.batch_norm(
        t(2, 4, 3), torch.empty(4, device='meta'), torch.empty(4, device='meta'),
        training=True),
    'channels-last batch norm': lambda: F.batch_norm(
        t(2, 4, 3, 3).contiguous(memory_format=torch.channels_last),
        torch.empty(4, device='meta'), torch.empty(4, device='meta')),
    'layer norm': lambda: F.layer_norm(t(2, 5, 6), (6, ), t(6), t(6)),
    'layer norm over two dims': lambda: F.layer_norm(t(2, 5, 6), (5, 6)),
    'group norm': lambda: F.group_norm(t(2, 8, 3, 3), 4, t(8), t(8)),
    'relu': lambda: F.relu(t(2, 3, 4)),
    'relu in place': lambda: F.relu(t(2, 3, 4) * 1, inplace=True),
    'hardtanh in place': lambda: F.hardtanh(t(2, 3) * 1, 0.0, 6.0, inplace=True),
    'gelu tanh': lambda: F.gelu(t(2, 3), approximate='tanh'),
    'add with alpha': lambda: torch.add(t(2, 3), t(2, 3), alpha=2),
    'add broadcast': lambda: t(2, 4, 3, 3) + t(1, 4, 1, 1),
    'mul by a scalar': lambda: t(2, 3) * 2,
    'add in place': lambda: (t(2, 3) * 1).add_(t(2, 3)),
    'div rounding': lambda: torch.div(t(2, 3), t(2, 3), rounding_mode='floor'),
    'clamp': lambda: t(3, 3).clamp(min=0.0, max=1.0),
    'integer add': lambda: torch.empty(2, 3, device='meta', dtype=torch.int64) + 1,
    'mixed dtypes': lambda: t(2, 3) + torch.empty(2, 3, device='meta', dtype=torch.float16),
}

MISMATCHES = {
    'conv input channels': lambda: F.conv2d(t(1, 5, 6, 6), t(8, 4, 3, 3)),
    'batch norm statistics': lambda: F.batch_norm(t(2, 4, 3, 3), torch.empty(5, device='meta'),
                                                  torch.empty(5, device='meta')),
    'layer norm shape': lambda: F.layer_norm(t(2, 5, 4), (6, )),
    'layer norm weight': lambda: F.layer_norm(t(2, 5, 6), (6, ), t(5)),
    'group norm channels': lambda: F.group_norm(t(2, 6, 3, 3), 4),
    'add shapes': lambda: t(2, 3) + t(2, 4),
}


def _describe(out):
    return (tuple(out.shape), out.stride(), out.dtype, type(out.grad_fn).__name__)


@pytest.mark.parametrize('name', CASES)
def test_same_shapes_strides_dtypes_and_grad_fns_as_torch(name):
    expected = _describe(CASES[name]())
    with FastMetaOps():
        assert _describe(CASES[name]()) == expected


@pytest.mark.parametrize('name', MISMATCHES)
def test_mismatched_sizes_raise_as_in_torch(name):
    with pytest.raises(RuntimeError):
        MISMATCHES[name]()
    with FastMetaOps(), pytest.raises(RuntimeError):
        MISMATCHES[name]()
