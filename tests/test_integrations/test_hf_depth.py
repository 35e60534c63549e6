"""Depth pruning of Hugging Face stacks: layers ranked on calibration batches and removed,
with the config's layer count, per-layer lists and the layers' layer_idx following, so
the KV cache and save/reload keep working."""
import copy

import pytest
import torch
import torch.nn as nn
from hf_builders import (MODELS, VOCAB, build, main_output, minicpm3, relative_error,
                         token_inputs)

from razorlib.integrations.transformers import (decoder_layers, prune, prune_decoder_layers,
                                                remove_decoder_layers, save_pruned)


def _make_identity(name: str, model: nn.Module, index: int) -> None:
    """Zero the projections a layer adds to the residual stream: the layer adds nothing."""
    layer = model.get_submodule(decoder_layers(model))[index]
    out_projections = {'llama': ('self_attn.o_proj', 'mlp.down_proj'),
                       'qwen2': ('self_attn.o_proj', 'mlp.down_proj'),
                       'gpt2': ('attn.c_proj', 'mlp.c_proj')}[name]
    for path in out_projections:
        for param in layer.get_submodule(path).parameters():
            nn.init.zeros_(param)


@pytest.mark.parametrize('name', ['llama', 'qwen2', 'gpt2'])
@pytest.mark.parametrize('metric', ['cosine', 'loss'])
def test_a_layer_that_adds_nothing_goes_first_and_the_logits_stay(name, metric):
    model, inputs = build(name, num_hidden_layers=3) if name != 'gpt2' else build(name, n_layer=3)
    _make_identity(name, model, 1)
    batches = [token_inputs(seed=1), token_inputs(seed=2)]
    targets = {id(batch): main_output(model, batch) for batch in batches}

    def loss_fn(net, batch):  # distance to the full model's logits: 0 only for no change
        return (net(**batch).logits - targets[id(batch)]).square().mean()

    result = prune_decoder_layers(model, batches, num=1, metric=metric, loss_fn=loss_fn)
    stack = decoder_layers(model)
    assert result.removed == [f'{stack}.1']
    assert result.importance[f'{stack}.1'] == pytest.approx(0, abs=1e-6)
    assert result.model.config.num_hidden_layers == 2 and model.config.num_hidden_layers == 3
    assert relative_error(main_output(result.model, inputs), main_output(model, inputs)) < 1e-5


def test_the_loss_metric_defaults_to_the_models_own_loss():
    model, inputs = build('llama')
    batch = dict(inputs, labels=inputs['input_ids'])
    result = prune_decoder_layers(model, [batch], num=1, metric='loss')
    with torch.no_grad():
        full = model(**batch).loss
        without_first = remove_decoder_layers(copy.deepcopy(model), [0])(**batch).loss
    assert result.importance['model.layers.0'] == pytest.approx(float(without_first - full),
                                                                rel=1e-4)
    with pytest.raises(ValueError, match='labels'):
        prune_decoder_layers(model, [inputs], num=1, metric='loss')


@pytest.mark.parametrize('name', ['llama', 'qwen2', 'gpt2'])
def test_the_kv_cache_follows_the_renumbered_layers(name):
    model, _ = build(name)
    slim = remove_decoder_layers(prune(model, token_inputs(), ratio=0.5), [0])
    layers = slim.get_submodule(decoder_layers(slim))
    assert [m.layer_idx for m in layers[0].modules() if hasattr(m, 'layer_idx')][0] == 0
    ids = token_inputs(batch=1, length=6)['input_ids']
    with torch.no_grad():
        full = slim(input_ids=ids).logits[:, -1]
        cached = slim(input_ids=ids[:, :-1], use_cache=True)
        step = slim(input_ids=ids[:, -1:], past_key_values=cached.past_key_values).logits[:, -1]
    torch.testing.assert_close(step, full, rtol=1e-4, atol=1e-5)


def test_per_layer_config_lists_follow_and_the_shallow_model_reloads(tmp_path):
    model, inputs = build('qwen2', num_hidden_layers=3,
                          layer_types=['full_attention', 'sliding_attention', 'full_attention'],
                          use_sliding_window=True, sliding_window=4)
    slim = remove_decoder_layers(prune(model, inputs, ratio=0.5), [1])
    assert slim.config.layer_types == ['full_attention', 'full_attention']
    save_pruned(slim, tmp_path)
    again = type(model).from_pretrained(tmp_path).eval()
    assert again.config.num_hidden_layers == 2
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


@pytest.mark.parametrize('name', sorted(MODELS))
def test_every_model_loses_a_layer_and_reloads(name, tmp_path):
    model, inputs = build(name)
    result = prune_decoder_layers(model, [inputs], ratio=0.5)
    assert len(result.removed) == 1
    save_pruned(result.model, tmp_path)
    again = type(model).from_pretrained(tmp_path).eval()
    assert relative_error(main_output(again, inputs), main_output(result.model, inputs)) <= 1e-6


def test_removal_errors_name_the_fault():
    model, _ = build('llama')
    with pytest.raises(ValueError, match='keep at least one'):
        remove_decoder_layers(model, [0, 1])
    gpt2, _ = build('gpt2', scale_attn_by_inverse_layer_idx=True)
    with pytest.raises(ValueError, match='scale_attn_by_inverse_layer_idx'):
        remove_decoder_layers(gpt2, [0])
    with pytest.raises(TypeError, match='remove_blocks'):
        remove_decoder_layers(nn.Sequential(nn.Linear(2, 2)), [0])


def _qwen2_moe(**placement) -> nn.Module:
    transformers = pytest.importorskip('transformers')
    torch.manual_seed(0)
    return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
        num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, vocab_size=VOCAB,
        **placement)).eval()


def _llama4(interleave_moe_layer_step: int) -> nn.Module:
    """Llama 4 with 4 layers: every one MoE at step 1 (as Scout), every other at 2."""
    transformers = pytest.importorskip('transformers')
    torch.manual_seed(0)
    return transformers.Llama4ForCausalLM(transformers.Llama4TextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=32, intermediate_size_mlp=64,
        num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        num_local_experts=2, interleave_moe_layer_step=interleave_moe_layer_step)).eval()


def test_layers_placed_by_stride_refuse_to_move():
    """Qwen2-MoE places its MoE blocks by ``decoder_sparse_step``: after a removal the
    config would build MoE blocks where MLPs are (and ``from_pretrained`` initialise
    them), so the removal is refused first."""
    model = _qwen2_moe(decoder_sparse_step=2)
    before = {name: tuple(p.shape) for name, p in model.named_parameters()}
    with pytest.raises(ValueError, match=r'builds another kind of layer at position \d .*'
                       r'decoder_sparse_step.*nothing was removed'):
        remove_decoder_layers(model, [0])
    assert {name: tuple(p.shape) for name, p in model.named_parameters()} == before
    assert model.config.num_hidden_layers == 4


@pytest.mark.parametrize('build, field, dense, shallow', [
    (lambda: _llama4(1), 'moe_layers', [0, 1, 2, 3], [0, 1, 2]),
    (lambda: _llama4(2), 'moe_layers', [1, 3], [2]),
    (lambda: _qwen2_moe(mlp_only_layers=[3]), 'mlp_only_layers', [3], [2])],
    ids=['llama4-every-layer-moe', 'llama4-every-other-layer-moe', 'qwen2-moe-mlp-only'])
def test_layers_listed_by_index_are_renumbered_and_the_shallow_model_reloads(
        build, field, dense, shallow, tmp_path):
    """Lists of layer indices (Llama 4's ``moe_layers``, Qwen2-MoE's ``mlp_only_layers``)
    follow the cut as indices: Llama 4 Scout's every-layer ``[0, 1, 2, 3]`` was sliced as
    a list of one entry per layer, to ``[0, 2, 3]``, and every cut was refused."""
    model, inputs = build(), token_inputs()
    assert getattr(model.config, field) == dense
    remove_decoder_layers(model, [1])
    assert getattr(model.config, field) == shallow and model.config.num_hidden_layers == 3
    model.save_pretrained(tmp_path)
    again = type(model).from_pretrained(tmp_path).eval()
    assert [[type(m) for m in layer.children()] for layer in again.model.layers] == \
        [[type(m) for m in layer.children()] for layer in model.model.layers]
    assert torch.equal(main_output(again, inputs), main_output(model, inputs))


def test_gpt_neo_layers_are_renumbered_by_their_layer_id_too():
    # GPT-Neo indexes its KV cache by layer_id, not layer_idx
    from transformers import GPTNeoConfig, GPTNeoForCausalLM
    torch.manual_seed(0)
    config = GPTNeoConfig(vocab_size=64, hidden_size=16, num_layers=4, num_heads=2,
                          attention_types=[[['global', 'local'], 2]], window_size=4,
                          max_position_embeddings=32)
    slim = remove_decoder_layers(GPTNeoForCausalLM(config).eval(), [1])
    assert [block.attn.attention.layer_id for block in slim.transformer.h] == [0, 1, 2]
    ids = token_inputs(batch=1, length=6)['input_ids'] % 64
    with torch.no_grad():
        full = slim(input_ids=ids).logits[:, -1]
        cached = slim(input_ids=ids[:, :-1], use_cache=True)
        step = slim(input_ids=ids[:, -1:], past_key_values=cached.past_key_values).logits[:, -1]
    torch.testing.assert_close(step, full, rtol=1e-4, atol=1e-5)


def _minicpm3(layers: int):
    torch.manual_seed(0)
    return minicpm3(num_hidden_layers=layers).eval()


def test_a_layer_scale_computed_from_the_layer_count_refuses_the_cut():
    # MiniCPM3's residual_scale = scale_depth / sqrt(num_hidden_layers): a reload of the
    # shallower config would scale every layer otherwise
    model = _minicpm3(4)
    with pytest.raises(ValueError, match=r'num_hidden_layers=3 builds layer 0 with '
                       r'residual_scale=0\.808.* holds 0\.7 .*nothing was removed'):
        remove_decoder_layers(model, [1])
    assert len(model.model.layers) == 4
