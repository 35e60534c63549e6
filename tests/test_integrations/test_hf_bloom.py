"""BLOOM's GeLU is a custom autograd Function (``GeLUFunctionBackward``, elementwise): its
MLPs prune through it (razorlib.prune pruned nothing of BLOOM before: that grad_fn froze
every MLP, and ALiBi's ``baddbmm`` the attention), the slim model computes the masked one,
and save_pruned / load_pruned bring it back (its MLP width, 4 x hidden_size, has no
config field)."""
import warnings

import pytest
import torch
from hf_builders import VOCAB, deploy_checked, main_output, relative_error, token_inputs

from razorlib.integrations.transformers import load_pruned, prune, save_pruned
from razorlib.pruning import L1NormPruner
from razorlib.tracing.rules import rule_for

transformers = pytest.importorskip('transformers')

MLPS = [f'transformer.h.{i}.mlp.dense_h_to_4h' for i in range(2)]


def bloom():
    torch.manual_seed(0)
    return transformers.BloomForCausalLM(transformers.BloomConfig(
        vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4)).eval()


def test_the_bloom_gelu_passes_channels_through():
    assert rule_for('GeLUFunctionBackward').kind == 'pass'


def test_bloom_mlps_prune_and_the_slim_model_computes_the_masked_one():
    model, inputs = bloom(), token_inputs()
    dense = main_output(model, inputs)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, inputs)
    assert set(MLPS) <= set(pruner.groups.prunable)
    assert pruner.groups.prunable[MLPS[0]].consumers == ['transformer.h.0.mlp.dense_4h_to_h']
    pruner.set_subnet(pruner.subnet_at(0.5))
    masked, slim = deploy_checked(pruner, model, inputs)
    assert [slim.get_submodule(name).out_features for name in MLPS] == [64, 64]
    assert relative_error(masked, dense) > 1e-2


def test_a_pruned_bloom_says_its_attention_stays_whole_and_reloads_with_save_pruned(tmp_path):
    model, inputs = bloom(), token_inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        slim = prune(model, inputs, ratio=0.5)
    said = [str(w.message) for w in caught]
    assert any('attention of BloomForCausalLM is left whole in 2 module(s)' in m for m in said)
    assert any('save_pruned' in m for m in said)  # no config field for the MLP width
    assert not any('nothing was pruned' in m for m in said)
    assert [slim.get_submodule(name).out_features for name in MLPS] == [64, 64]
    assert not save_pruned(slim, tmp_path).exact
    again = load_pruned(tmp_path)
    assert type(again) is transformers.BloomForCausalLM
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6
