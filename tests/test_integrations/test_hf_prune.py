"""Hugging Face models from tiny configs: the one-call razorlib.prune with dict inputs
(whole heads and MLP channels; the hidden size only on request), a masked supernet that
computes and counts what its slim model does, the key/value cache off on real weights, and
transformers' Conv1D (GPT-2) as a layer kind."""
import copy
import re
import warnings

import pytest
import torch
import torch.nn as nn
from hf_builders import (HALF_ATTENTION, MODELS, VOCAB, attention_widths, build, main_output,
                         relative_error, token_inputs)

import razorlib
from razorlib.integrations.transformers import build_like, hidden_size_keys
from razorlib.integrations.transformers.config import shape_mismatches
from razorlib.layers import kind_of
from razorlib.pruning import L1NormPruner
from razorlib.tracing.forward import record_forward
from razorlib.utils import get_model_complexity

transformers = pytest.importorskip('transformers')
Conv1D = transformers.pytorch_utils.Conv1D


def _shapes(module: nn.Module):
    return [tuple(p.shape) for p in module.parameters()]


def _assert_heads_and_mlps_halved(model: nn.Module, slim: nn.Module, name: str) -> None:
    mlp_in = MODELS[name][2]
    for i in range(model.config.num_hidden_layers):
        dense, pruned = (m.get_submodule(mlp_in.format(i=i)) for m in (model, slim))
        assert kind_of(pruned).widths(pruned)['out'] == kind_of(dense).widths(dense)['out'] // 2
        assert attention_widths(slim, name, i) == HALF_ATTENTION[name]


@pytest.mark.parametrize('name', sorted(MODELS))
def test_one_call_prune_halves_heads_and_mlps_and_keeps_the_hidden_size(name):
    model, inputs = build(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        slim = razorlib.prune(model, inputs, ratio=0.5)
    said = [str(w.message) for w in caught if str(w.message).startswith('razorlib.prune')]
    _assert_heads_and_mlps_halved(model, slim, name)
    assert _shapes(slim.get_input_embeddings()) == _shapes(model.get_input_embeddings())
    assert main_output(slim, inputs).shape == main_output(model, inputs).shape
    # the config is rewritten; BERT and GPT-2 derive the head width from the head count,
    # so their configs cannot describe fewer heads, and only that is said
    mismatches = shape_mismatches(slim, build_like(slim))  # a model its config builds
    if name in ('bert', 'gpt2'):
        assert mismatches and all(re.search('attn|attention', m.name) for m in mismatches)
        assert len(said) == 1 and re.match(
            rf"razorlib.prune: the slim \w+'s config cannot describe {len(mismatches)} of "
            r'its tensors \(.*(?:attn|attention).*\); save it with '
            'razorlib.integrations.transformers.save_pruned', said[0])
    else:
        assert mismatches == [] and said == []


def test_one_call_prune_opts_in_to_the_hidden_size_and_says_outputs_change():
    model, inputs = build('vit')
    with pytest.warns(UserWarning, match=r'hidden=True\) pruned the hidden size of '
                      r'ViTForImageClassification .*outputs change'):
        slim = razorlib.prune(model, inputs, ratio=0.5, hidden=True)
    assert slim.vit.embeddings.patch_embeddings.projection.out_channels == 32
    assert slim.classifier.in_features == 32
    assert attention_widths(slim, 'vit', 1) == HALF_ATTENTION['vit']
    assert main_output(slim, inputs).shape == main_output(model, inputs).shape


@pytest.mark.parametrize('hidden', [False, True], ids=['hidden-whole', 'hidden-pruned'])
@pytest.mark.parametrize('name', sorted(MODELS))
def test_masked_model_computes_and_counts_what_the_slim_model_does(name, hidden):
    model, inputs = build(name)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=() if hidden else hidden_size_keys(model))
    pruner.prepare_from_supernet(model, inputs)
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    masked_count = get_model_complexity(model, inputs)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    _assert_heads_and_mlps_halved(model, slim, name)
    embeddings = _shapes(slim.get_input_embeddings())
    if not hidden or name == 'bert':  # BertModel returns its hidden states
        assert embeddings == _shapes(model.get_input_embeddings())
    elif name == 'vit':
        assert embeddings == [(32, 3, 8, 8), (32, )]
    else:  # RMSNorms (Llama, Qwen2, Mistral) and LayerNorms (GPT-2) follow
        assert embeddings == [(VOCAB, 32)]
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    slim_params = sum(p.numel() for p in slim.parameters())
    assert masked_count.params == slim_params < sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize('implementation', ['eager', 'sdpa'])
def test_key_value_heads_prune_with_the_cache_on(implementation):
    model, inputs = build('llama', attn_implementation=implementation, use_cache=True)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model))
    pruner.prepare_from_supernet(model, inputs)
    assert model.config.use_cache is True
    assert pruner.groups.prunable['model.layers.0.self_attn.v_proj'].num_channels == 2
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert attention_widths(slim, 'llama', 0) == (32, 16, 16, 32)
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4


@pytest.mark.parametrize('meta', [True, False])
def test_forwards_on_real_weights_run_without_the_cache_and_meta_ones_with_it(meta):
    # without a cache transformers reads position values (``.item()``), which meta
    # tensors lack; with real weights nothing needs the cache, so it stays off
    model, inputs = build('llama', use_cache=True)
    seen = []
    handle = model.register_forward_pre_hook(lambda module, args: seen.append(
        (module.config.use_cache, module.lm_head.weight.is_meta)))
    record = record_forward(model, inputs, meta=meta)
    handle.remove()
    assert record.device == ('meta' if meta else 'real')
    assert seen == [(meta, meta)]
    assert model.config.use_cache is True


@pytest.mark.parametrize('hidden', [False, True], ids=['hidden-whole', 'hidden-pruned'])
@pytest.mark.parametrize('name, embed', [('llama', 'model.embed_tokens'),
                                         ('gpt2', 'transformer.wte')])
def test_tied_embeddings_and_lm_head_stay_tied(name, embed, hidden):
    model, inputs = build(name, tie_word_embeddings=True)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=() if hidden else hidden_size_keys(model))
    pruner.prepare_from_supernet(model, inputs)
    assert (pruner.get_space_id(embed) is not None) == hidden
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    masked_params = get_model_complexity(model, inputs).params
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert slim.lm_head.weight is slim.get_submodule(embed).weight
    assert slim.lm_head.weight.shape == (100, 32 if hidden else 64)
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    assert masked_params == sum(p.numel() for p in slim.parameters())  # the tie counts once


class _Linears(nn.Module):
    def __init__(self, first: nn.Module, second: nn.Module):
        super().__init__()
        self.first, self.second = first, second

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def test_conv1d_prunes_as_the_linear_with_its_weight_transposed():
    torch.manual_seed(0)
    convs = _Linears(Conv1D(16, 6), Conv1D(3, 16)).eval()
    linears = _Linears(nn.Linear(6, 16), nn.Linear(16, 3)).eval()
    with torch.no_grad():
        for conv, linear in ((convs.first, linears.first), (convs.second, linears.second)):
            conv.bias.normal_()
            linear.weight.copy_(conv.weight.t())
            linear.bias.copy_(conv.bias)
    x = torch.randn(4, 5, 6)
    slims = []
    for model in (convs, linears):
        pruner = L1NormPruner(ratio=0.5)
        pruner.prepare_from_supernet(model, x)
        assert sorted(pruner.groups.prunable) == ['first']
        pruner.set_subnet(pruner.sample_subnet())
        slims.append(pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet()))
    slim_convs, slim_linears = slims
    assert (slim_convs.first.nx, slim_convs.first.nf, slim_convs.second.nx) == (6, 8, 8)
    torch.testing.assert_close(slim_convs.first.weight, slim_linears.first.weight.t())
    torch.testing.assert_close(slim_convs(x), slim_linears(x))
    count = get_model_complexity(slim_convs, x)
    assert (count.params, count.flops) == (
        get_model_complexity(slim_linears, x).params, get_model_complexity(slim_linears, x).flops)


def test_qwen3s_per_head_norms_keep_heads_and_the_hidden_size_prunable():
    # q_norm / k_norm are RMSNorms over each head's head_dim: walked op by op there,
    # while the decoder's RMSNorms follow the pruned hidden size
    model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=VOCAB)).eval()
    inputs = token_inputs()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, inputs)
    assert {gid: g.num_channels for gid, g in pruner.groups.prunable.items()} == {
        'model.embed_tokens': 64, **{f'model.layers.{i}.{name}': width for i in range(2)
                                     for name, width in (('self_attn.v_proj', 2),
                                                         ('mlp.up_proj', 128))}}
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    masked_params = get_model_complexity(model, inputs).params
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    attention = slim.model.layers[0].self_attn
    assert (attention.q_proj.in_features, attention.q_proj.out_features) == (32, 32)
    assert attention.q_norm.weight.shape == (16, ) and slim.model.norm.weight.shape == (32, )
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    assert masked_params == sum(p.numel() for p in slim.parameters())


def test_a_tokenizers_batch_encoding_is_taken_as_keyword_inputs():
    model, inputs = build('llama')
    encoded = transformers.BatchEncoding(inputs)  # what a tokenizer returns: no dict
    slim = razorlib.prune(model, encoded, ratio=0.5, importance='wanda',
                          data=[(encoded, None)])
    assert attention_widths(slim, 'llama', 0) == HALF_ATTENTION['llama']
    assert main_output(slim, inputs).shape == main_output(model, inputs).shape


@pytest.mark.parametrize('name', ['llama', 'gpt2', 'bert'])
def test_a_text_model_without_example_inputs_is_told_to_pass_them(name):
    # the default 1x3x224x224 image failed in the embedding with a float-indices error
    model, _ = build(name)
    message = f"{type(model).__name__} reads 'input_ids', not an image: pass example inputs"
    with pytest.raises(ValueError, match=re.escape(message)):
        razorlib.prune(model, None, ratio=0.5)
    with pytest.raises(ValueError, match=re.escape(message)):
        get_model_complexity(model)


def test_a_vision_model_may_still_use_the_default_image():
    model, inputs = build('vit', image_size=224, patch_size=32)
    assert get_model_complexity(model).flops == get_model_complexity(
        model, torch.randn(1, 3, 224, 224)).flops
