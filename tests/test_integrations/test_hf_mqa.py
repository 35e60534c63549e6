"""Multi-query attention in a Hugging Face Llama (4 query heads over one key/value head):
``gqa='query'`` cannot pair the query heads with a one-head axis, so it warns, naming the
attention, and prunes the rest; the workaround it names (one key/value head per query
head, ``gqa='kv'``) prunes the query heads."""
import copy
import warnings

import pytest
import torch
from hf_builders import attention_widths, build, main_output, relative_error

import razorlib
from razorlib.integrations.transformers import hidden_size_keys
from razorlib.pruning import L1NormPruner
from razorlib.utils import get_model_complexity

transformers = pytest.importorskip('transformers')

WARNING = (r"gqa='query' prunes no query heads of model.layers.0.self_attn \(and 1 more\): "
           r'its 4 query heads share a single key/value head \(multi-query attention, '
           r'num_key_value_heads=1\)')


@pytest.mark.parametrize('implementation', ['eager', 'sdpa'])
def test_gqa_query_on_a_single_kv_head_warns_and_keeps_the_attention(implementation):
    model, inputs = build('llama', num_key_value_heads=1,
                          attn_implementation=implementation)
    with pytest.warns(UserWarning, match=WARNING) as record:
        slim = razorlib.prune(model, inputs, ratio=0.5, gqa='query')
    assert any(w.filename == __file__ for w in record)
    for i in range(2):
        assert attention_widths(slim, 'llama', i) == (64, 16, 16, 64)
        assert slim.model.layers[i].mlp.up_proj.out_features == 64
    assert (slim.config.num_attention_heads, slim.config.num_key_value_heads) == (4, 1)


def test_head_width_on_a_single_kv_head_warns_and_keeps_the_attention():
    """heads='width' cannot pair head_dim positions with the one key/value head either
    (RoPE's frequencies bind them across layers): said, not silent."""
    model, inputs = build('llama', num_key_value_heads=1)
    match = (r"heads='width' prunes no head_dim positions of model.layers.0.self_attn "
             r"\(and 1 more\): .* prune again with heads='width'")
    with pytest.warns(UserWarning, match=match):
        slim = razorlib.prune(model, inputs, ratio=0.5, heads='width')
    for i in range(2):
        assert attention_widths(slim, 'llama', i) == (64, 16, 16, 64)
    grouped, inputs = build('llama', num_key_value_heads=2)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        slim = razorlib.prune(grouped, inputs, ratio=0.5, heads='width')
    assert not [w for w in record if 'prunes no head_dim' in str(w.message)]
    assert attention_widths(slim, 'llama', 0) == (32, 16, 16, 32)


def test_the_masked_model_computes_what_the_slim_model_does():
    model, inputs = build('llama', num_key_value_heads=1)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model), gqa='query')
    with pytest.warns(UserWarning, match=WARNING):
        pruner.prepare_from_supernet(model, inputs)
    assert sorted(pruner.groups.prunable) == [f'model.layers.{i}.mlp.up_proj' for i in range(2)]
    torch.manual_seed(0)
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    params = get_model_complexity(model, inputs).params
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    assert params == sum(p.numel() for p in slim.parameters())


def test_the_named_workaround_prunes_query_heads():
    model, inputs = build('llama', num_key_value_heads=1)
    config = copy.deepcopy(model.config)
    config.num_key_value_heads = config.num_attention_heads
    repeated = transformers.LlamaForCausalLM(config).eval()
    state = {name: tensor.repeat(4, 1) if name.endswith(('k_proj.weight', 'v_proj.weight'))
             else tensor for name, tensor in model.state_dict().items()}
    repeated.load_state_dict(state)
    assert relative_error(main_output(repeated, inputs), main_output(model, inputs)) <= 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter('error', UserWarning)
        slim = razorlib.prune(repeated, inputs, ratio=0.5, gqa='kv')
    for i in range(2):
        assert attention_widths(slim, 'llama', i) == (32, 32, 32, 32)
    assert (slim.config.num_attention_heads, slim.config.num_key_value_heads) == (2, 2)
