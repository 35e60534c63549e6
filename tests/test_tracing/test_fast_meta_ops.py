"""FastMetaOps: shape-only kernels agree with torch's own meta kernels, errors included."""
import pytest
import torch
import torch.nn.functional as F

from razorlib.tracing.forward import FastMetaOps


def t(*shape):
    return torch.empty(shape, device='meta', requires_grad=True)


def _offsets(device):
    """grouped_mm's group ends: 8 tokens in groups of 2, 2 and 4."""
    return torch.tensor([2, 4, 8], dtype=torch.int32, device=device)


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
    'squeeze-excitation gate': lambda: torch.sigmoid(t(1, 8, 1, 1)) * t(1, 8, 5, 5),
    'gate on the right': lambda: t(2, 8, 5, 5) * t(2, 8, 1, 1),
    'layer scale': lambda: t(8, 1, 1) * t(2, 8, 3, 3),
    'broadcast in place': lambda: (t(2, 8, 3, 3) * 1).mul_(t(8, 1, 1)),
    'scalar tensor': lambda: t(2, 3) * torch.tensor(2.0, device='meta'),
    'complex scalar': lambda: t(2, 3) * 1j,
    'permuted operands': lambda: t(2, 3, 4).transpose(1, 2) + t(2, 3, 4).transpose(1, 2),
    'channels-last operands': lambda: (
        t(2, 4, 3, 3).contiguous(memory_format=torch.channels_last) + t(4, 1, 1)),
    'gate of strides (1, 1, c, c)': lambda: t(1, 8, 1, 1).contiguous(
        memory_format=torch.channels_last) * t(1, 8, 5, 5),
    'channels-last times a gate': lambda: t(1, 8, 5, 5).contiguous(
        memory_format=torch.channels_last) * t(1, 8, 1, 1),
    'gate times channels-last': lambda: t(1, 8, 1, 1) * t(1, 8, 5, 5).contiguous(
        memory_format=torch.channels_last),
    'mixed layouts': lambda: t(2, 4, 3, 3).contiguous(memory_format=torch.channels_last)
    + t(2, 4, 3, 3),
    'transposed and broadcast': lambda: t(3, 4).t() + t(4, 1),
    'layer norm, permuted input': lambda: F.layer_norm(t(1, 8, 5, 5).permute(0, 2, 3, 1),
                                                       (8, ), t(8), t(8)),
    'cat on channels': lambda: torch.cat([t(1, 4, 5, 5), t(1, 2, 5, 5), t(1, 3, 5, 5)], 1),
    'cat, negative dim': lambda: torch.cat([t(2, 3), t(2, 5)], -1),
    'cat of (n, c, 1, 1)': lambda: torch.cat([t(1, 4, 1, 1), t(1, 2, 1, 1)], 1),
    'cat, channels-last': lambda: torch.cat(
        [t(1, 4, 3, 3).contiguous(memory_format=torch.channels_last)] * 2, 1),
    'mean over spatial dims': lambda: t(2, 8, 5, 5).mean([2, 3]),
    'mean keepdim': lambda: t(2, 8, 5, 5).mean((-1, -2), keepdim=True),
    'sum over everything': lambda: t(2, 3).sum(),
    'sum over a dim': lambda: t(2, 3, 4).sum(1),
    'contiguous of a transpose': lambda: t(2, 3, 4).transpose(1, 2).contiguous(),
    'clone': lambda: t(2, 3).clone(),
    'linear': lambda: F.linear(t(4, 6), t(5, 6), t(5)),
    'matmul': lambda: t(4, 6) @ t(6, 3),
    'batched matmul': lambda: torch.bmm(t(2, 4, 6), t(2, 6, 3)),
    'softmax': lambda: torch.softmax(t(2, 3, 5), -1),
    'grouped mm, bfloat16': lambda: F.grouped_mm(
        t(8, 16).bfloat16(), t(3, 16, 8).bfloat16(), offs=_offsets('meta')),
}

MISMATCHES = {
    'conv input channels': lambda: F.conv2d(t(1, 5, 6, 6), t(8, 4, 3, 3)),
    'batch norm statistics': lambda: F.batch_norm(t(2, 4, 3, 3), torch.empty(5, device='meta'),
                                                  torch.empty(5, device='meta')),
    'layer norm shape': lambda: F.layer_norm(t(2, 5, 4), (6, )),
    'layer norm weight': lambda: F.layer_norm(t(2, 5, 6), (6, ), t(5)),
    'group norm channels': lambda: F.group_norm(t(2, 6, 3, 3), 4),
    'add shapes': lambda: t(2, 3) + t(2, 4),
    'broadcast shapes': lambda: t(2, 8, 3, 3) * t(2, 4, 1, 1),
    'broadcast in place to a larger shape': lambda: (t(8, 1, 1) * 1).mul_(t(2, 8, 3, 3)),
    'cat sizes': lambda: torch.cat([t(1, 4, 5, 5), t(1, 2, 4, 5)], 1),
    'cat ranks': lambda: torch.cat([t(1, 4, 5, 5), t(4, 5, 5)], 1),
    'cat dim': lambda: torch.cat([t(2, 3), t(2, 3)], 2),
    'mean dim': lambda: t(2, 3).mean(2),
    'mean repeated dim': lambda: t(2, 3).mean([1, 1]),
    'matmul sizes': lambda: t(4, 6) @ t(5, 3),
    'linear bias': lambda: F.linear(t(4, 6), t(5, 6), t(4)),
    'batched matmul batch': lambda: torch.bmm(t(2, 4, 6), t(3, 6, 3)),
    'grouped mm sizes': lambda: F.grouped_mm(t(8, 16).bfloat16(), t(3, 8, 8).bfloat16(),
                                             offs=_offsets('meta')),
    'grouped mm, rows not 16-byte aligned': lambda: F.grouped_mm(
        t(8, 16).bfloat16(), t(3, 16, 6).bfloat16(), offs=_offsets('meta')),
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
    with pytest.raises(Exception) as expected:
        MISMATCHES[name]()
    assert expected.type in (RuntimeError, IndexError)
    with FastMetaOps(), pytest.raises(expected.type):
        MISMATCHES[name]()


@pytest.mark.parametrize('transposed', [False, True], ids=['(G, K, N)', '(G, N, K) transposed'])
def test_float32_grouped_mm_runs_on_meta_as_on_cpu(transposed):
    """torch's meta kernel asks for bfloat16, its CPU kernel takes float32: fused experts
    in float32 run on CPU, and FastMetaOps traces them on meta alike (transformers
    passes its ``(E, out, in)`` weights transposed)."""
    def grouped(device):
        weight = torch.randn(3, 8, 12, device=device).transpose(1, 2) if transposed else \
            torch.randn(3, 12, 8, device=device)
        return F.grouped_mm(torch.randn(8, 12, device=device, requires_grad=True),
                            weight.requires_grad_(), offs=_offsets(device))
    with pytest.raises(RuntimeError, match='BF16'):
        grouped('meta')
    with FastMetaOps():
        assert _describe(grouped('meta')) == _describe(grouped('cpu'))


@pytest.mark.parametrize('tokens,hidden,kept', [(8, 10, 8), (1, 6, 8), (8, 16, 6)],
                         ids=['hidden 10', 'one token of 6', 'outputs of 6'])
def test_float32_grouped_mm_on_meta_refuses_rows_the_cpu_kernel_refuses(
        tokens, hidden, kept):
    """Strides of a multiple of 16 bytes, whatever the dim's size (one token too)."""
    def grouped(device):
        return F.grouped_mm(torch.randn(tokens, hidden, device=device),
                            torch.randn(3, hidden, kept, device=device),
                            offs=torch.tensor([0, 0, tokens], dtype=torch.int32,
                                              device=device))
    with pytest.raises(RuntimeError, match='16 bytes'):
        grouped('cpu')
    with FastMetaOps(), pytest.raises(RuntimeError, match='16 bytes'):
        grouped('meta')


@pytest.mark.parametrize('case', ['float64', 'int64 offsets', 'no unit stride'])
def test_grouped_mm_on_meta_fails_where_the_cpu_kernel_does(case):
    def grouped(device):
        dtype = torch.float64 if case == 'float64' else torch.float32
        a = torch.randn(8, 64 if case == 'no unit stride' else 16, dtype=dtype, device=device)
        a = a[:, ::4] if case == 'no unit stride' else a
        offs = _offsets(device).to(torch.int64 if case == 'int64 offsets' else torch.int32)
        return F.grouped_mm(a, torch.randn(3, 16, 8, dtype=dtype, device=device), offs=offs)
    with pytest.raises(RuntimeError):
        grouped('cpu')
    with FastMetaOps(), pytest.raises(RuntimeError):
        grouped('meta')
