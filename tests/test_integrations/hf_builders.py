"""Hugging Face models built from tiny configs (no downloads), with inputs for one forward."""
from typing import Callable, Dict, Tuple

import torch
import torch.nn as nn
from masked_vs_slim import deploy_checked, main_output, relative_error  # noqa: F401 (shared)

from razorlib.layers import kind_of

transformers = __import__('pytest').importorskip('transformers')

VOCAB = 100
_DECODER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB)
_ENCODER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4)


def llama4() -> nn.Module:
    """Llama 4: a dense layer, then a layer of 2 routed experts and a shared one."""
    torch.manual_seed(0)
    return transformers.Llama4ForCausalLM(transformers.Llama4TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=64, intermediate_size_mlp=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_local_experts=2, interleave_moe_layer_step=2)).eval()


def llama(**overrides) -> nn.Module:
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**_DECODER, **overrides}))


def qwen2(**overrides) -> nn.Module:
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**{**_DECODER, **overrides}))


def mistral(**overrides) -> nn.Module:
    return transformers.MistralForCausalLM(
        transformers.MistralConfig(**{**_DECODER, **overrides}))


def phi3(**overrides) -> nn.Module:
    """Phi-3: one fused ``qkv_proj`` cut at the config's query and key/value widths."""
    config = dict(_DECODER, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return transformers.Phi3ForCausalLM(transformers.Phi3Config(**{**config, **overrides}))


def gpt2(**overrides) -> nn.Module:
    config = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=32,
                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**{**config, **overrides}))


def gpt_bigcode(**overrides) -> nn.Module:
    """GPTBigCode (StarCoder); ``multi_query=True`` cuts one ``c_attn`` into the queries and
    a single key/value head by fixed sizes."""
    config = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=32,
                  bos_token_id=0, eos_token_id=0)
    return transformers.GPTBigCodeForCausalLM(
        transformers.GPTBigCodeConfig(**{**config, **overrides}))


def minicpm3(**overrides) -> nn.Module:
    """MiniCPM3: multi-head latent attention (``q_lora_rank``, ``kv_lora_rank``), the
    embeddings scaled by ``scale_emb``, every residual branch by ``scale_depth /
    sqrt(num_hidden_layers)`` and the hidden states divided by ``hidden_size /
    dim_model_base`` (here 4) before the tied ``lm_head``."""
    config = dict(_DECODER, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=32,
                  qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=16, head_dim=16,
                  dim_model_base=16, scale_emb=12, scale_depth=1.4)
    return transformers.MiniCPM3ForCausalLM(
        transformers.MiniCPM3Config(**{**config, **overrides}))


def bert(**overrides) -> nn.Module:
    config = dict(_ENCODER, vocab_size=VOCAB, max_position_embeddings=32)
    return transformers.BertModel(transformers.BertConfig(**{**config, **overrides}))


def vit(**overrides) -> nn.Module:
    config = dict(_ENCODER, image_size=32, patch_size=8, num_labels=10)
    return transformers.ViTForImageClassification(
        transformers.ViTConfig(**{**config, **overrides}))


def token_inputs(batch: int = 2, length: int = 8, seed: int = 0) -> Dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {'input_ids': torch.randint(0, VOCAB, (batch, length), generator=generator)}


def image_inputs(batch: int = 2, seed: int = 0) -> Dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {'pixel_values': torch.randn(batch, 3, 32, 32, generator=generator)}


#: name -> (builder, inputs, the MLP's input layer in block ``{i}``)
MODELS: Dict[str, Tuple[Callable[..., nn.Module], Callable[..., Dict], str]] = {
    'llama': (llama, token_inputs, 'model.layers.{i}.mlp.up_proj'),
    'qwen2': (qwen2, token_inputs, 'model.layers.{i}.mlp.up_proj'),
    'mistral': (mistral, token_inputs, 'model.layers.{i}.mlp.up_proj'),
    'phi3': (phi3, token_inputs, 'model.layers.{i}.mlp.gate_up_proj'),
    'gpt2': (gpt2, token_inputs, 'transformer.h.{i}.mlp.c_fc'),
    'bert': (bert, token_inputs, 'encoder.layer.{i}.intermediate.dense'),
    'vit': (vit, image_inputs, 'vit.layers.{i}.mlp.fc1'),
}


#: name -> block ``{i}``'s attention projections: (query, key, value, output); GPT-2's fused
#: ``c_attn`` and Phi-3's ``qkv_proj`` compute all three.
ATTENTION: Dict[str, Tuple[str, str, str, str]] = {
    'llama': tuple(f'model.layers.{{i}}.self_attn.{p}_proj' for p in 'qkvo'),
    'qwen2': tuple(f'model.layers.{{i}}.self_attn.{p}_proj' for p in 'qkvo'),
    'mistral': tuple(f'model.layers.{{i}}.self_attn.{p}_proj' for p in 'qkvo'),
    'phi3': ('model.layers.{i}.self_attn.qkv_proj', ) * 3
    + ('model.layers.{i}.self_attn.o_proj', ),
    'gpt2': ('transformer.h.{i}.attn.c_attn', ) * 3 + ('transformer.h.{i}.attn.c_proj', ),
    'bert': tuple(f'encoder.layer.{{i}}.attention.self.{p}' for p in ('query', 'key', 'value'))
    + ('encoder.layer.{i}.attention.output.dense', ),
    'vit': tuple(f'vit.layers.{{i}}.attention.{p}_proj' for p in 'qkvo'),
}


#: The attention widths of :data:`ATTENTION` in every block at ratio 0.5 (query, key,
#: value outputs; the output projection's input): half the heads of 16, for Llama-likes one
#: of two key/value heads with its two query heads (Phi-3's ``qkv_proj``: 32 + 16 + 16).
HALF_ATTENTION: Dict[str, Tuple[int, int, int, int]] = {
    'llama': (32, 16, 16, 32), 'qwen2': (32, 16, 16, 32), 'mistral': (32, 16, 16, 32),
    'phi3': (64, 64, 64, 32), 'gpt2': (96, 96, 96, 32), 'bert': (32, 32, 32, 32),
    'vit': (32, 32, 32, 32)}


def attention_widths(model: nn.Module, name: str, block: int) -> Tuple[int, int, int, int]:
    """Block ``block``'s widths in the order of :data:`HALF_ATTENTION`."""
    *qkv, out = (kind_of(m).widths(m) for m in
                 (model.get_submodule(path.format(i=block)) for path in ATTENTION[name]))
    return tuple(widths['out'] for widths in qkv) + (out['in'], )


def build(name: str, seed: int = 0, **overrides) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """The model ``name`` in eval mode (weights drawn from ``seed``) and its inputs."""
    builder, inputs, _ = MODELS[name]
    torch.manual_seed(seed)
    return builder(**overrides).eval(), inputs()
