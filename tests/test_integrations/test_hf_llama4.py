"""Llama 4 applies RoPE as a complex product (``view_as_complex`` of the query and key
heads' pairs, times ``freqs_cis``, ``view_as_real``): those two grad_fns drop and add a
trailing dim of 2 and pass the heads through, so Llama 4's attention heads prune.  Before,
both were unknown ops, and q_proj and k_proj (and with them every head) stayed whole."""
import warnings

import pytest
import torch
from hf_builders import deploy_checked, llama4, main_output, relative_error, token_inputs

from razorlib.integrations import transformers as hf
from razorlib.integrations.transformers import hidden_size_keys
from razorlib.nn import EveryTokenExperts, fuse_experts, split_experts
from razorlib.pruning import L1NormPruner
from razorlib.utils import get_model_complexity

transformers = pytest.importorskip('transformers')


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


def test_llama4_experts_split_run_as_fused_and_fuse_back():
    """Llama 4's experts (``bmm`` over every token, the router's scores scaling the rows
    beforehand) split into one module per expert: the same outputs, FLOPs and params."""
    model, inputs = llama4(), token_inputs()
    dense, counts = main_output(model, inputs), get_model_complexity(model, inputs)
    fused = model.model.layers[1].feed_forward.experts
    split_experts(model)
    experts = model.model.layers[1].feed_forward.experts
    assert isinstance(experts, EveryTokenExperts) and experts.widths() == [64, 64]
    torch.testing.assert_close(main_output(model, inputs), dense)
    split = get_model_complexity(model, inputs)
    assert (split.flops, split.params) == (counts.flops, counts.params)
    fuse_experts(model)
    again = model.model.layers[1].feed_forward.experts
    assert type(again) is type(fused) and torch.equal(again.gate_up_proj, fused.gate_up_proj)
    assert torch.equal(again.down_proj, fused.down_proj)
    torch.testing.assert_close(main_output(model, inputs), dense)


def test_llama4_prunes_each_experts_width_and_reloads_from_its_config(tmp_path):
    """Before, Llama 4's experts stayed whole (no split for its ``bmm``), and its dense
    layers' MLP width (``intermediate_size_mlp``) was not written to the config."""
    model, inputs = llama4(), token_inputs()
    split = split_experts(llama4())
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(split))
    pruner.prepare_from_supernet(split, inputs)
    assert {f'model.layers.1.feed_forward.experts.experts.{e}.up_proj'
            for e in (0, 1)} <= set(pruner.groups.prunable)
    pruner.set_subnet(pruner.subnet_at(0.5))
    deploy_checked(pruner, split, inputs)  # masked == slim
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # the config describes every width
        slim = hf.prune(model, inputs, ratio=0.5)
    experts = slim.model.layers[1].feed_forward.experts
    assert experts.gate_up_proj.shape == (2, 64, 64) and experts.expert_dim == 32
    assert (slim.config.intermediate_size, slim.config.intermediate_size_mlp) == (32, 64)
    slim.save_pretrained(tmp_path)
    again = transformers.Llama4ForCausalLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(main_output(again, inputs), main_output(slim, inputs))
