"""``get_model_complexity`` on mixture-of-experts code: grouped products of tokens and
expert weights (``torch._grouped_mm``, transformers' default experts) and a router that
returns more than its logits."""
import pytest
import torch
import torch.nn as nn

from razorlib.utils import get_model_complexity


class GroupedExperts(nn.Module):
    """4 experts of 8 -> 4 over tokens sorted by expert, the weight stored (E, out, in)
    and passed transposed, as transformers stores and passes it (the CPU kernel wants
    rows of a multiple of 16 bytes)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4, 8))

    def forward(self, tokens):
        offs = torch.tensor([3, 3, 7, 10], dtype=torch.int32)  # experts of 3, 0, 4, 3 tokens
        return torch._grouped_mm(tokens, self.weight.transpose(1, 2), offs=offs)


class FallbackExperts(GroupedExperts):
    """The same experts through transformers' fallback op (one product per expert)."""

    def forward(self, tokens):
        offs = torch.tensor([3, 3, 7, 10], dtype=torch.int32)
        return torch.ops.transformers.grouped_mm_fallback(tokens, self.weight.transpose(1, 2),
                                                          offs=offs)


@pytest.mark.parametrize('experts', ['grouped_mm', 'fallback'])
def test_a_grouped_product_counts_each_token_once_against_its_expert(experts):
    if experts == 'fallback':
        pytest.importorskip('transformers.integrations.moe')  # registers the op
    model = GroupedExperts() if experts == 'grouped_mm' else FallbackExperts()
    per_module = {}
    result = get_model_complexity(model, torch.randn(10, 8), per_module)
    assert result.flops == 10 * 8 * 4 and per_module == {'<functional>': 320}


class Router(nn.Linear):
    """An ``nn.Linear`` whose forward returns its logits and what it derives from them."""

    def forward(self, x):
        logits = super().forward(x)
        return logits, logits.topk(2, dim=-1).indices


def test_a_layer_returning_a_tuple_counts_its_first_tensor():
    result = get_model_complexity(Router(8, 4), torch.randn(3, 8))
    assert result.flops == 3 * 8 * 4 and result.params == 36


@pytest.mark.parametrize('implementation', ['grouped_mm', 'batched_mm', 'eager'])
def test_mixtral_counts_its_experts_in_every_implementation(implementation):
    """transformers runs experts as one grouped product (the default), as batched
    products of the rows picked from the stacked weights, or one expert at a time."""
    transformers = pytest.importorskip('transformers')
    torch.manual_seed(0)
    config = transformers.MixtralConfig(
        hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=50, num_local_experts=4, num_experts_per_tok=2)
    model = transformers.MixtralForCausalLM(config).eval()
    model.set_experts_implementation(implementation)
    inputs = {'input_ids': torch.randint(3, 50, (2, 8))}
    flops = get_model_complexity(model, inputs).flops
    # per token: q, k, v, o (32 x 32, 16 x 32, 16 x 32, 32 x 32), router (4 x 32), head
    # (50 x 32), three norms of 32, and 2 experts' gate and up (64 x 32) and down (32 x 32)
    per_token = 32 * (32 + 16 + 16 + 32 + 4 + 50) + 3 * 32 + 2 * (64 * 32 + 32 * 32)
    assert flops == 16 * per_token
