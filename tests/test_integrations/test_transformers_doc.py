"""docs/transformers.md's code runs as written, on the small models its note names."""
import random
import re
from pathlib import Path

import torch
from hf_builders import build, image_inputs, token_inputs

DOC = Path(__file__).resolve().parents[2] / 'docs' / 'transformers.md'


def test_the_page_code_runs(tmp_path, monkeypatch):
    blocks = re.findall(r'```python\n(.*?)```', DOC.read_text(), flags=re.S)
    assert len(blocks) == 6
    model, inputs = build('llama', num_hidden_layers=4)
    namespace = dict(model=model, ids=inputs['input_ids'], inputs=inputs,
                     batches=[token_inputs(seed=1), token_inputs(seed=2)],
                     images=[image_inputs(seed=1)['pixel_values']])
    monkeypatch.chdir(tmp_path)
    random.seed(2)  # RatioPruner draws per-layer widths that differ (32, 96, 96, 32)
    for block in blocks:
        exec(compile(block, str(DOC), 'exec'), namespace)
    again, slim = namespace['again'], namespace['slim']
    moe = namespace['moe_slim']  # the mixture-of-experts section: routed experts pruned
    assert moe.config.moe_intermediate_size == 16
    assert moe.model.layers[0].mlp.experts.gate_up_proj.shape == (4, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(again(**inputs).logits, slim.eval()(**inputs).logits)
    resnet, cut, fresh = namespace['resnet'], namespace['result'].model, namespace['fresh']
    assert sum(map(len, cut.stages)) == sum(map(len, resnet.stages)) - 2
    image = namespace['images'][0]
    with torch.no_grad():
        torch.testing.assert_close(fresh.eval()(image), cut(image))
    assert len({layer.mlp.up_proj.out_features for layer in slim.model.layers}) > 1
    assert (tmp_path / 'slim' / 'razorlib_channels.json').exists()
    # the large-model section: the meta plan has every layer's heads and MLP, and the
    # checkpoint slimmed shard by shard computes what the masked model computes
    plan, streamed = namespace['plan'], namespace['streamed']
    assert sorted(plan.groups.prunable) == sorted(
        f'model.layers.{i}.{name}' for i in range(4)
        for name in ('self_attn.v_proj', 'mlp.up_proj'))
    assert streamed.config.intermediate_size == model.config.intermediate_size // 2
    with torch.no_grad():
        torch.testing.assert_close(streamed.eval()(**inputs).logits, model(**inputs).logits)
