"""What the trace leaves whole is said: GPTBigCode's multi-query attention stays whole
under the default ``gqa='kv'``, so only its MLPs shrink, and ``razorlib.prune`` warns
once, naming the first attention and why; a hidden size that ``hidden=True`` cannot prune
is named with its reason too.  (Phi-3's fused ``qkv_proj`` prunes: ``test_hf_phi3.py``.)"""
import warnings

import pytest
import torch
from hf_builders import VOCAB, build, token_inputs

import razorlib

transformers = pytest.importorskip('transformers')


def _bigcode():
    torch.manual_seed(0)
    return transformers.GPTBigCodeForCausalLM(transformers.GPTBigCodeConfig(
        n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, multi_query=True,
        bos_token_id=0, eos_token_id=0)).eval()


@pytest.mark.parametrize('builder, first, why', [
    (_bigcode, 'transformer.h.0.attn', r'transformer.h.0.attn.c_attn: \[fixed\] '
     r"BmmBackward0: 4 query heads over a single key/value head \(multi-query attention\): "
     r"gqa='kv' prunes a key/value head with its query heads")])
def test_attention_left_whole_is_named_with_its_reason(builder, first, why):
    model = builder()
    with pytest.warns(UserWarning, match=rf'razorlib.prune: the attention of \w+ is left '
                      rf'whole in 2 module\(s\), {first} \(and 1 more\) \({why}.*\); the rest '
                      'is pruned') as record:
        slim = razorlib.prune(model, token_inputs(), ratio=0.5)
    assert any(w.filename == __file__ for w in record)
    assert sum(p.numel() for p in slim.parameters()) < sum(p.numel() for p in model.parameters())


def test_no_word_where_heads_prune_or_the_user_kept_them():
    model, inputs = build('llama')
    with warnings.catch_warnings():
        warnings.simplefilter('error', UserWarning)
        razorlib.prune(model, inputs, ratio=0.5)
        razorlib.prune(model, inputs, ratio=0.5, except_start_keys=[
            f'model.layers.{i}.self_attn' for i in range(2)])


def test_hidden_true_that_prunes_no_hidden_size_says_why():
    model, inputs = build('bert')  # a headless encoder: the hidden states are its output
    with pytest.warns(UserWarning, match=r'razorlib.prune\(hidden=True\) prunes no hidden size '
                      r'of BertModel \(\[output\] .*channels of a model output.*\); the rest is '
                      'pruned'):
        razorlib.prune(model, inputs, ratio=0.5, hidden=True)
    model, inputs = build('gpt2')
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        razorlib.prune(model, inputs, ratio=0.5, hidden=True)
    assert not [w for w in record if 'prunes no hidden size' in str(w.message)]


def test_hidden_true_names_a_hidden_size_whose_key_is_a_parent_module():
    """DINOv2's hidden-size key, ``embeddings.patch_embeddings``, is the parent of the conv
    that writes the hidden size: the key is a prefix, as ``except_start_keys`` are."""
    model = transformers.Dinov2Model(transformers.Dinov2Config(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
        image_size=16, patch_size=8)).eval()
    with pytest.warns(UserWarning, match=r'prunes no hidden size of Dinov2Model \(\[output\]'):
        razorlib.prune(model, torch.randn(1, 3, 16, 16), ratio=0.5, hidden=True)
