"""``pruning/masks.py``: the hooks' errors name the module by its name in the model (a
model holds many modules of one class)."""
import pickle

import pytest
import torch
import torch.nn as nn

from razorlib.layers import kind_of
from razorlib.pruning.masks import MaskedInputError, add_masks


class KeywordNorm(nn.BatchNorm2d):
    """A norm whose input may come by another keyword: only its output is masked, so the
    forward hook is the one that looks for the input."""

    def forward(self, x=None, *, features=None):
        return super().forward(features if x is None else x)


CALLS = {
    'the input hook (Linear)': (lambda: nn.Linear(4, 2), -1, 'Linear', 'input',
                                lambda m: m(inp=torch.zeros(1, 4))),
    'the output hook (a norm)': (lambda: KeywordNorm(4).eval(), -3, 'KeywordNorm', 'x',
                                 lambda m: m(features=torch.zeros(1, 4, 2, 2))),
}


@pytest.mark.parametrize('case', CALLS)
def test_a_masked_layer_called_without_its_input_is_named(case):
    build, out_dim, cls, key, call = CALLS[case]
    module = build()
    add_masks(module, kind_of(module), out_dim, 'blocks.0.proj')
    with pytest.raises(TypeError) as error:
        call(module)
    assert str(error.value) == (
        f"masked {cls} 'blocks.0.proj' was called without its input (no positional "
        f"argument and no {key!r} keyword): its masks cannot apply")


class KeywordNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = KeywordNorm(4)
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.head(self.norm(features=self.conv(x)))


def test_the_pruner_names_the_masked_module_in_the_model():
    from razorlib.pruning import L1NormPruner
    model = KeywordNet().eval()
    L1NormPruner(ratio=0.5).prepare_from_supernet(model, torch.randn(1, 3, 6, 6))
    with pytest.raises(TypeError, match="masked KeywordNorm 'norm' was called without"):
        model(torch.randn(1, 3, 6, 6))


@pytest.mark.parametrize('build, x', [
    (lambda: nn.Conv2d(3, 4, 3), torch.randn(1, 1, 8, 8)),  # 1 channel for 3
    (lambda: nn.Linear(4, 2), torch.randn(2, 1)),
])
def test_a_masked_layer_refuses_an_input_its_mask_would_broadcast(build, x):
    """``x * in_mask`` broadcast a 1-channel input to the layer's width, so the masked
    model ran (and was counted on) an input the layer itself refuses."""
    module = build()
    with pytest.raises(RuntimeError):
        module(x)
    add_masks(module, kind_of(module), out_dim=-1 if isinstance(module, nn.Linear) else -3,
              name='stem')
    with pytest.raises(RuntimeError, match=r"^stem \((Conv2d|Linear)\): its input has shape "
                                           r'\((1, 1, 8, 8|2, 1)\), but it takes (3|4) channels'):
        module(x)


def test_a_refused_input_is_a_masked_input_error_naming_its_layer():
    """Typed, the layer apart from what is wrong: a caller naming the layer itself (
    tools/get_flops.py) takes the detail without parsing the message; still the
    RuntimeError it was, and it survives a trip through pickle (a process pool's)."""
    conv = nn.Conv2d(3, 4, 3)
    add_masks(conv, kind_of(conv), out_dim=-3, name='stem')
    with pytest.raises(MaskedInputError) as caught:
        conv(torch.randn(1, 1, 8, 8))
    err = caught.value
    assert isinstance(err, RuntimeError)
    assert err.layer == 'stem (Conv2d)'
    assert err.detail == 'its input has shape (1, 1, 8, 8), but it takes 3 channels at dim -3'
    assert str(err) == f'{err.layer}: {err.detail}'
    copy = pickle.loads(pickle.dumps(err))
    assert (type(copy), copy.layer, copy.detail, str(copy)) == \
        (MaskedInputError, err.layer, err.detail, str(err))


def test_a_kind_written_to_the_four_argument_masked_output_still_masks():
    """docs/layer_kinds.md documented masked_output(module, x, out, keep): a user's kind
    written so is called so (the call argument goes to kinds that take it)."""
    from razorlib.layers import BatchNormKind
    from razorlib.pruning.masks import OUT_MASK, set_mask

    class HalvingKind(BatchNormKind):
        def masked_output(self, module, x, out, keep):
            return out * keep / 2

    norm = nn.BatchNorm2d(4).eval()
    add_masks(norm, HalvingKind(), out_dim=-3, name='bn')
    set_mask(norm, OUT_MASK, torch.tensor([True, False, True, True]))
    x = torch.randn(2, 4, 3, 3)
    with torch.no_grad():
        expected = nn.functional.batch_norm(x, norm.running_mean, norm.running_var,
                                            norm.weight, norm.bias) / 2
        expected[:, 1] = 0
        torch.testing.assert_close(norm(x), expected)
