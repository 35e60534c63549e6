"""Llama 4 applies RoPE as a complex product (``view_as_complex`` of the query and key
heads' pairs, times ``freqs_cis``, ``view_as_real``): those two grad_fns drop and add a
trailing dim of 2 and pass the heads through, so Llama 4's attention heads prune.  Before,
both were unknown ops, and q_proj and k_proj (and with them every head) stayed whole."""
import pytest
import torch
from hf_builders import VOCAB, deploy_checked, main_output, relative_error, token_inputs

from razorlib.integrations.transformers import hidden_size_keys
from razorlib.pruning import L1NormPruner

transformers = pytest.importorskip('transformers')


def llama4():
    torch.manual_seed(0)
    return transformers.Llama4ForCausalLM(transformers.Llama4TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=64, intermediate_size_mlp=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_local_experts=2, interleave_moe_layer_step=2)).eval()


def test_llama4_heads_prune_through_its_complex_rope_and_the_slim_model_computes_the_masked_one():
    model, inputs = llama4(), token_inputs()
    dense = main_output(model, inputs)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model))
    pruner.prepare_from_supernet(model, inputs)
    attention = [f'model.layers.{i}.self_attn.{proj}' for i in range(2)
                 for proj in ('q_proj', 'k_proj', 'v_proj')]
    assert not [name for name in attention
                if not any(name in group.layers for group in pruner.groups.prunable.values())]
    pruner.set_subnet(pruner.subnet_at(0.5))
    masked, slim = deploy_checked(pruner, model, inputs)
    assert relative_error(masked, dense) > 1e-2
    widths = [slim.get_submodule(name).out_features for name in attention]
    assert widths == [32, 16, 16] * 2  # half the query heads and half the key/value heads


def test_head_widths_of_a_complex_rope_freeze_naming_the_pairs():
    """Under ``heads='width'`` the split reaches the (real, imaginary) pairs: the query
    and key widths freeze, saying why, and the rest prunes as the masked model computes."""
    model, inputs = llama4(), token_inputs()
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model), heads='width')
    pruner.prepare_from_supernet(model, inputs)
    for proj in ('q_proj', 'k_proj'):
        group = next(g for g in pruner.groups.groups.values()
                     if f'model.layers.0.self_attn.{proj}' in g.layers)
        assert not group.prunable
        assert any(str(r).startswith('[shape] ViewAsComplexBackward0: reads channels as '
                                     '(real, imaginary) pairs') for r in group.frozen_reasons)
    assert 'model.layers.0.feed_forward.up_proj' in pruner.groups.prunable
    pruner.set_subnet(pruner.subnet_at(0.5))
    deploy_checked(pruner, model, inputs)
