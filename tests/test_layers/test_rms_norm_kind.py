"""RMSNormKind on the RMSNorms it meets beyond a plain 1-D ``nn.RMSNorm``: transformers'
weightless ones, a weight held as a buffer, ``nn.RMSNorm`` over two dims and in float64.
Each is pruned after a Linear: the masked supernet computes and counts what its slim
model does."""
import importlib

import pytest
import torch
import torch.nn as nn
from masked_vs_slim import sample_and_deploy

from razorlib.layers import RMSNormKind, kind_of
from razorlib.pruning import L1NormPruner
from razorlib.utils import get_model_complexity


def _transformers_class(module: str, name: str) -> type:
    pytest.importorskip('transformers')
    try:
        return getattr(importlib.import_module(f'transformers.models.{module}'), name)
    except (ImportError, AttributeError):
        pytest.skip(f'this transformers has no {name}')


def _around(norm: nn.Module, width: int = 8) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, width), norm, nn.Linear(width, 4)).eval()


def _pruned(model: nn.Module, x: torch.Tensor) -> nn.Module:
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    return sample_and_deploy(pruner, model, x)


@pytest.mark.parametrize('module, name, kwargs', [
    ('nanochat.modeling_nanochat', 'NanoChatRMSNorm', {}),
    ('gemma3n.modeling_gemma3n', 'Gemma3nRMSNorm', dict(dim=8, with_scale=False)),
], ids=['nanochat', 'gemma3n-v-norm'])
def test_a_weightless_rms_norm_of_unknown_width_is_walked_op_by_op(module, name, kwargs):
    """No weight, no ``normalized_shape``: no mask can be sized for it, so it has no kind
    (counting and pruning used to raise AttributeError on its missing ``weight``)."""
    norm = _transformers_class(module, name)(**kwargs)
    model, x = _around(norm), torch.randn(2, 5, 3)
    assert get_model_complexity(model, x).params == 32 + 36
    slim = _pruned(model, x)  # its mean over the channels freezes them
    assert (slim[0].out_features, slim[2].in_features) == (8, 8)
    assert kind_of(norm) is None


def test_a_weight_held_as_a_buffer_is_sliced_as_a_buffer_and_not_counted():
    """FalconMamba's weightless RMSNorm keeps a dummy ``weight`` buffer: slicing it used to
    raise KeyError (planned as a parameter), and the kind counted it as parameters."""
    norm = _transformers_class('falcon_mamba.modeling_falcon_mamba',
                               'FalconMambaWeightlessRMSNorm')(8)
    model, x = _around(norm), torch.randn(2, 5, 3)
    slim = _pruned(model, x)
    assert slim[1].weight.shape == (4, ) and 'weight' in slim[1]._buffers
    assert get_model_complexity(slim, x).params == sum(p.numel() for p in slim.parameters())
    kind = kind_of(norm)
    assert isinstance(kind, RMSNormKind) and kind.params(norm, {}) == 0


def test_an_rms_norm_over_two_dims_keeps_its_channels():
    """``nn.RMSNorm((4, 8))``'s statistic spans dims the channels do not: the tracer walks
    its ops (freezing the channels) as for ``LayerNorm((4, 8))``, where it used to bind them
    and fail on the masks it then disagreed with; its width is its last dim."""
    norm = nn.RMSNorm((4, 8))
    model, x = _around(norm), torch.randn(2, 4, 3)
    slim = _pruned(model, x)
    assert (slim[0].out_features, slim[1].normalized_shape) == (8, (4, 8))
    assert kind_of(norm).widths(norm) == {'out': 8}


def test_the_masked_output_keeps_float64():
    """The rescaling ran in float32, so a float64 model's masked output was only float32
    accurate against its slim one."""
    torch.manual_seed(0)
    norm = nn.RMSNorm(6).double()
    keep = torch.tensor([1., 0., 1., 1., 0., 1.], dtype=torch.float64)
    x = torch.randn(3, 6, dtype=torch.float64) * keep
    out = RMSNormKind().masked_output(norm, x, norm(x), keep)
    kept = keep.bool()
    slim = nn.RMSNorm(4).double()
    with torch.no_grad():
        slim.weight.copy_(norm.weight[kept])
    assert out.dtype == torch.float64
    torch.testing.assert_close(out[:, kept], slim(x[:, kept]), rtol=1e-12, atol=1e-12)
    assert not out[:, ~kept].any()
