"""Falcon's ``FalconLinear`` multiplies by ``self.weight.T`` in its own forward (no
``F.linear``): its layers are traced as the Linears they are, so the MLPs prune (they
were left whole, with no reason given), and the slim model computes the masked one."""

import pytest
import torch
from hf_builders import VOCAB, deploy_checked, main_output, relative_error, token_inputs

from razorlib.integrations.transformers import hidden_size_keys
from razorlib.pruning import L1NormPruner

transformers = pytest.importorskip('transformers')


def test_falcon_mlps_prune_and_the_slim_model_computes_the_masked_one():
    torch.manual_seed(0)
    model = transformers.FalconForCausalLM(transformers.FalconConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB,
        new_decoder_architecture=True, num_kv_heads=2)).eval()
    inputs = token_inputs()
    dense = main_output(model, inputs)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model))
    pruner.prepare_from_supernet(model, inputs)
    mlps = [f'transformer.h.{i}.mlp.dense_h_to_4h' for i in range(2)]
    assert set(mlps) <= set(pruner.groups.prunable)
    assert pruner.groups.prunable[mlps[0]].consumers == ['transformer.h.0.mlp.dense_4h_to_h']
    torch.manual_seed(0)
    pruner.set_subnet(pruner.sample_subnet())
    masked, slim = deploy_checked(pruner, model, inputs)
    assert [slim.get_submodule(name).out_features for name in mlps] == [128, 128]
    assert relative_error(masked, dense) > 1e-2
