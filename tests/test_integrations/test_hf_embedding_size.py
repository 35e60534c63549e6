"""Factorised embeddings (ALBERT, ELECTRA: ``embedding_size`` projected to
``hidden_size``): a pruned model saves and reloads exactly, the hidden size pruned or not.

Before, ``sync_config`` left ``embedding_size`` stale when the embeddings were pruned, and
with them kept it rewrote ELECTRA's ``hidden_size`` down to ``embedding_size``, a config
that builds no ``embeddings_project``: ``save_pruned`` refused both ("the slim model
differs from its config in ways razorlib cannot write as a channel config")."""
import copy
import warnings

import pytest
import torch
from hf_builders import VOCAB, main_output, relative_error, token_inputs

import razorlib
from razorlib.integrations.transformers import hidden_size_keys, load_pruned, prune, save_pruned

transformers = pytest.importorskip('transformers')


@pytest.mark.parametrize('hidden', [False, True])
@pytest.mark.parametrize('cls,config', [('ElectraForSequenceClassification', 'ElectraConfig'),
                                        ('ElectraForMaskedLM', 'ElectraConfig'),
                                        ('AlbertForMaskedLM', 'AlbertConfig')])
def test_a_pruned_model_with_factorised_embeddings_reloads_exactly(cls, config, hidden,
                                                                   tmp_path):
    torch.manual_seed(0)
    model = getattr(transformers, cls)(getattr(transformers, config)(
        vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=1,
        num_attention_heads=4, intermediate_size=64)).eval()
    inputs = token_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # the head widths: the config cannot say them
        slim = prune(copy.deepcopy(model), inputs, ratio=0.5, hidden=hidden)
    save_pruned(slim, tmp_path)
    assert slim.config.embedding_size == (8 if hidden else 16)
    again = load_pruned(tmp_path)
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


def test_a_tensor_no_config_builds_does_not_stop_the_other_rewrites():
    """A head the user attached is built by no config, the dense one included: the
    rewrite of the widths a config can say still happens (the check that a config builds
    every tensor of the model counts only tensors the config before it built)."""
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=64)).eval()
    model.extra_head = torch.nn.Linear(32, 3)  # never called: not pruned, not in any config
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        slim = prune(copy.deepcopy(model), token_inputs(), ratio=0.5)
    assert slim.config.intermediate_size == 32
    assert slim.encoder.layer[0].intermediate.dense.out_features == 32


@pytest.mark.parametrize('cls,config,projection,mlp', [
    ('ElectraForSequenceClassification', 'ElectraConfig', 'electra.embeddings_project',
     'electra.encoder.layer.0.intermediate.dense'),
    ('AlbertForMaskedLM', 'AlbertConfig', 'albert.encoder.embedding_hidden_mapping_in',
     'albert.encoder.albert_layer_groups.0.albert_layers.0.ffn')])
def test_hidden_false_keeps_the_hidden_size_behind_the_embeddings_projection(
        cls, config, projection, mlp):
    """``hidden=False`` keeps the hidden size whole where the embeddings are narrower and
    projected to it: the projection starts the residual stream, so it is kept with the
    embeddings.  Before, only the embeddings were kept, and the hidden size behind the
    projection pruned 32 -> 16, every encoder norm with it, under the default that says
    it stays whole."""
    torch.manual_seed(0)
    model = getattr(transformers, cls)(getattr(transformers, config)(
        vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=1,
        num_attention_heads=4, intermediate_size=64)).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        slim = razorlib.prune(model, token_inputs(), ratio=0.5)
    assert slim.get_submodule(projection).out_features == 32
    assert slim.config.hidden_size == 32 and slim.config.embedding_size == 16
    assert not any('norm takes its statistics over' in str(w.message) for w in caught)
    norms = {name: tuple(m.weight.shape) for name, m in slim.named_modules()
             if isinstance(m, torch.nn.LayerNorm) and '.encoder.' in name}
    assert norms and set(norms.values()) == {(32, )}
    assert slim.get_submodule(mlp).out_features == 32  # the MLP still prunes
    assert hidden_size_keys(model)[1:] == (projection, )
