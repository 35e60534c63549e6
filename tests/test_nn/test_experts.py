"""transformers' fused mixture-of-experts modules split into one module per expert: the
same outputs and FLOPs, each expert's width pruned (masked == slim), fused back at one
width per layer; layouts it does not compute refused with the model unchanged."""
import copy

import pytest
import torch
import torch.nn as nn
from masked_vs_slim import sample_and_deploy

from razorlib.nn import SplitExperts, fuse_experts, split_experts
from razorlib.pruning import L1NormPruner
from razorlib.tracing import build_groups, trace
from razorlib.utils import get_model_complexity

transformers = pytest.importorskip('transformers')

SMALL = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=32)


def mixtral():
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(
        **SMALL, intermediate_size=24, num_local_experts=4, num_experts_per_tok=2))


def qwen3_moe():
    return transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        **SMALL, intermediate_size=40, moe_intermediate_size=24, num_experts=4,
        num_experts_per_tok=2))


def olmoe():
    return transformers.OlmoeForCausalLM(transformers.OlmoeConfig(
        **SMALL, intermediate_size=24, num_experts=4, num_experts_per_tok=2))


def gpt_oss():
    """Its experts' weights and biases drawn at unit scale: transformers starts the biases
    at zero and the weights too small for the gating's clamps to act."""
    model = transformers.GptOssForCausalLM(transformers.GptOssConfig(
        **SMALL, intermediate_size=24, num_local_experts=4, num_experts_per_tok=2, head_dim=8,
        sliding_window=4))
    for layer in model.model.layers:
        for param in layer.mlp.experts.parameters():
            param.data.normal_(0, 1)
    return model


BUILDERS = {'mixtral': mixtral, 'qwen3_moe': qwen3_moe, 'olmoe': olmoe, 'gpt_oss': gpt_oss}


def built(name):
    torch.manual_seed(0)
    model = BUILDERS[name]().eval()
    ids = torch.randint(0, SMALL['vocab_size'], (2, 8), generator=torch.Generator().manual_seed(0))
    return model, {'input_ids': ids}


def experts_of(model):
    return [m for m in model.modules() if isinstance(m, SplitExperts)]


@pytest.mark.parametrize('name', sorted(BUILDERS))
def test_split_computes_and_counts_what_the_fused_experts_do(name):
    model, inputs = built(name)
    with torch.no_grad():
        dense = model(**inputs).logits
    fused_count = get_model_complexity(model, inputs)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    split_experts(model)
    assert len(experts_of(model)) == 2 and all(len(e.experts) == 4 for e in experts_of(model))
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, dense, atol=1e-5, rtol=1e-5)
    split_count = get_model_complexity(model, inputs)
    assert (split_count.flops, split_count.params) == (fused_count.flops, fused_count.params)
    fuse_experts(model)  # back to the transformers module, the same tensors
    assert not experts_of(model)
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, dense)


def test_every_expert_is_traced_even_one_no_token_is_routed_to():
    model, inputs = built('mixtral')
    split_experts(model)
    gate = model.model.layers[0].mlp.gate
    gate.weight.data.zero_()  # every token to the same two experts, none to the others
    _, _, chosen = gate(torch.randn(5, SMALL['hidden_size']))
    assert len(chosen.unique()) == 2
    groups = build_groups(trace(model, inputs))
    routed = sorted(gid for gid in groups.prunable if '.layers.0.mlp.experts' in gid)
    assert [gid.rsplit('.experts.', 1)[-1] for gid in routed] == \
        ['0.up_proj', '1.up_proj', '2.up_proj', '3.up_proj']


@pytest.mark.parametrize('name', sorted(BUILDERS))
def test_each_expert_prunes_and_its_slim_model_computes_the_masked_one(name):
    model, inputs = built(name)
    split_experts(model)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, inputs)
    routed = [gid for gid in pruner.groups.prunable if '.mlp.experts.experts.' in gid]
    assert len(routed) == 8  # each expert of each layer a group of its own
    slim = sample_and_deploy(pruner, model, inputs)
    assert [e.widths() for e in experts_of(slim)] == [[12] * 4] * 2


def test_experts_of_one_width_fuse_and_others_are_refused_naming_the_layer():
    model, inputs = built('mixtral')
    split_experts(model)
    layers = experts_of(model)
    for expert in layers[0].experts:  # layer 0: one width
        for attr, dim in (('gate_proj', 0), ('up_proj', 0), ('down_proj', 1)):
            linear = getattr(expert, attr)
            keep = torch.arange(12)
            linear.weight = nn.Parameter(linear.weight.detach().index_select(dim, keep))
            setattr(linear, 'out_features' if dim == 0 else 'in_features', 12)
    layers[1].experts[2].up_proj.weight.data = layers[1].experts[2].up_proj.weight.data[:5]
    layers[1].experts[2].up_proj.out_features = 5
    before = copy.deepcopy(model)
    with pytest.raises(ValueError, match=r'^model\.layers\.1\.mlp\.experts: its 4 experts '
                       r'have widths \[5, 24\], which one fused tensor cannot hold: keep one '
                       r'width per layer \(the model is unchanged\)$'):
        fuse_experts(model)
    assert len(experts_of(model)) == 2
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 before.state_dict().values()))
    del model.model.layers[1]
    model.config.num_hidden_layers = 1
    fuse_experts(model)
    fused = model.model.layers[0].mlp.experts
    assert type(fused).__name__ == 'MixtralExperts' and fused.intermediate_dim == 12
    assert fused.gate_up_proj.shape == (4, 24, 32) and fused.down_proj.shape == (4, 32, 12)
    model(**inputs)


def test_a_layout_it_does_not_compute_is_refused_with_the_model_unchanged():
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    class OwnGate(GptOssExperts):
        def _apply_gate(self, gate_up):
            return gate_up[..., ::2] * gate_up[..., 1::2]

    torch.manual_seed(0)
    model = gpt_oss().eval()
    model.model.layers[1].mlp.experts.__class__ = OwnGate
    with pytest.raises(ValueError, match=r'^model\.layers\.1\.mlp\.experts \(OwnGate\) has a '
                       r'gating of its own \(OwnGate\._apply_gate\), which split_experts '
                       r'cannot convert \(the model is unchanged\)$'):
        split_experts(model)
    with pytest.raises(ValueError, match=r'^OwnGate has a gating of its own'):
        SplitExperts.from_fused(model.model.layers[1].mlp.experts)
    model.model.layers[1].mlp.experts.__class__ = GptOssExperts
    model.model.layers[0].mlp.experts.has_post_expert_norm = True
    with pytest.raises(ValueError, match=r'^model\.layers\.0\.mlp\.experts \(GptOssExperts\) '
                       r'has has_post_expert_norm=True, which split_experts cannot convert'):
        split_experts(model)
    assert [type(layer.mlp.experts) for layer in model.model.layers] == [GptOssExperts] * 2
    assert not experts_of(model)


def test_gpt_oss_experts_fuse_back_to_their_interleaved_transposed_biased_layout():
    torch.manual_seed(0)
    model = gpt_oss().eval()
    dense = {name: p.detach().clone() for name, p in model.named_parameters() if 'experts' in name}
    fuse_experts(split_experts(model))
    again = {name: p for name, p in model.named_parameters() if 'experts' in name}
    assert dense.keys() == again.keys()
    assert all(torch.equal(dense[name], again[name]) for name in dense)


def test_index_add_binds_the_rows_it_adds_to_and_freezes_the_indexed_dim():
    class Scatter(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(4, 6), nn.Linear(4, 6), nn.Linear(6, 2)

        def forward(self, x):
            a, b = self.a(x[:2]), self.b(x[2:])
            out = torch.zeros(3, a.shape[1]).index_add(0, torch.tensor([0, 2]), a)
            return self.c(out.index_add(0, torch.tensor([1]), b))

    model, x = Scatter().eval(), torch.randn(3, 4)
    groups = build_groups(trace(model, x))
    (group, ) = groups.prunable.values()  # a, b and c's input are one group
    assert (sorted(group.layers), sorted(group.consumers)) == (['a', 'b'], ['c'])
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    slim = sample_and_deploy(pruner, model, x)
    assert slim.a.out_features == slim.b.out_features == slim.c.in_features < 6
