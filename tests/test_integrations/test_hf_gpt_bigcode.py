"""GPTBigCode without multi-query attention (``multi_query=False``): ``c_attn`` is viewed as
``(heads, 3 * head_dim)``, so whole heads prune, the ``GPT2Heads`` entry rewrites
``num_heads``, and the slim model reloads from the channel file (a config of fewer heads
would make them wider).  With ``multi_query=True`` the attention stays whole:
``test_hf_whole_attention.py``."""
import pytest
import torch
from hf_builders import gpt_bigcode, main_output, relative_error, token_inputs

import razorlib
from razorlib.integrations.transformers import load_pruned, save_pruned

transformers = pytest.importorskip('transformers')


@pytest.mark.parametrize('implementation', ['eager', 'sdpa'])
def test_heads_prune_and_reload_from_the_channel_file(implementation, tmp_path):
    torch.manual_seed(0)
    model = gpt_bigcode(multi_query=False, attn_implementation=implementation).eval()
    inputs = token_inputs()
    with pytest.warns(UserWarning, match=r"config cannot describe 6 of its tensors .*"
                      r"transformer\.h\.0\.attn\.c_attn\.bias: config builds \(192,\), the "
                      r"model has \(96,\)"):
        slim = razorlib.prune(model, inputs, ratio=0.5)
    for block in slim.transformer.h:  # 2 of 4 heads of 16, each 3 * 16 rows of c_attn
        attn = block.attn
        assert (attn.c_attn.out_features, attn.c_proj.in_features) == (96, 32)
        assert (attn.num_heads, attn.head_dim, attn.num_key_value_groups) == (2, 16, 1)
        assert block.mlp.c_fc.out_features == 128
    sync = save_pruned(slim, tmp_path)
    assert not sync.exact and slim.config.n_head == 4
    again = load_pruned(tmp_path, attn_implementation=implementation)
    assert again.transformer.h[1].attn.num_heads == 2
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6
