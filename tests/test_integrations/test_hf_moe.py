"""Mixture-of-experts models prune their routed experts: ``razorlib.prune`` splits the
fused experts (:func:`razorlib.nn.split_experts`), each expert keeps its own best
channels, the experts of a layer one width, and the slim model is the transformers class
again, its config rewritten (``moe_intermediate_size``) and reloaded by
``from_pretrained``.  Before, the fused experts' ``grouped_mm`` was an unknown op and
every routed expert stayed whole."""
import functools
import warnings

import pytest
import torch
import torch.nn as nn
from hf_builders import VOCAB, llama4, main_output, token_inputs
from masked_vs_slim import deploy_checked

import razorlib
from razorlib.integrations import transformers as hf
from razorlib.integrations.transformers.prune import uniform_experts
from razorlib.nn import split_experts
from razorlib.layers import LinearKind, RouterKind, kind_of
from razorlib.pruning import L1NormPruner
from razorlib.utils import get_model_complexity

transformers = pytest.importorskip('transformers')

SMALL = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=32)


def qwen2_moe():
    torch.manual_seed(0)
    return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        **SMALL, intermediate_size=40, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_experts=4, num_experts_per_tok=2)).eval()


def qwen3_moe():
    torch.manual_seed(0)
    return transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        **SMALL, intermediate_size=40, moe_intermediate_size=32, num_experts=4,
        num_experts_per_tok=2, head_dim=8)).eval()


def olmoe():
    torch.manual_seed(0)
    return transformers.OlmoeForCausalLM(transformers.OlmoeConfig(
        **SMALL, intermediate_size=32, num_experts=4, num_experts_per_tok=2)).eval()


def deepseek_v3():
    """Its router adds a per-expert buffer (``e_score_correction_bias``) to the scores."""
    torch.manual_seed(0)
    return transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(
        **{**SMALL, 'num_key_value_heads': 4}, intermediate_size=64, moe_intermediate_size=16,
        n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        first_k_dense_replace=1, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=8)).eval()


def mixtral(intermediate_size):
    torch.manual_seed(0)
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(
        **SMALL, intermediate_size=intermediate_size, num_local_experts=4,
        num_experts_per_tok=2)).eval()


def kept_rows(slim: torch.Tensor, dense: torch.Tensor) -> list:
    """The row of ``dense`` each row of ``slim`` is (exactly)."""
    return [next(i for i, row in enumerate(dense) if torch.equal(row, kept)) for kept in slim]


def test_each_expert_keeps_its_own_channels_at_one_width_and_reloads(tmp_path):
    model, inputs = qwen2_moe(), token_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # nothing left unpruned, nothing the config misses
        slim = hf.prune(model, inputs, ratio=0.5)
    assert type(slim) is transformers.Qwen2MoeForCausalLM
    assert (slim.config.moe_intermediate_size, slim.config.shared_expert_intermediate_size) \
        == (16, 24)
    for dense_layer, slim_layer in zip(model.model.layers, slim.model.layers):
        dense, cut = dense_layer.mlp.experts, slim_layer.mlp.experts
        assert cut.gate_up_proj.shape == (4, 32, 32) and cut.down_proj.shape == (4, 32, 16)
        kept = []
        for e in range(4):  # gate and up rows, and down columns, at the same channels
            gate = kept_rows(cut.gate_up_proj[e, :16], dense.gate_up_proj[e, :32])
            up = kept_rows(cut.gate_up_proj[e, 16:], dense.gate_up_proj[e, 32:])
            down = kept_rows(cut.down_proj[e].t(), dense.down_proj[e].t())
            assert gate == up == down == sorted(gate)
            kept.append(gate)
        assert len({tuple(k) for k in kept}) == 4  # each expert its own channels
    slim.save_pretrained(tmp_path)
    again = transformers.Qwen2MoeForCausalLM.from_pretrained(tmp_path).eval()
    assert torch.equal(main_output(again, inputs), main_output(slim, inputs))


def test_a_flops_budget_holds_at_one_width_per_layer_and_reloads(tmp_path, dense_counts):
    model, inputs = mixtral(intermediate_size=64), token_inputs()
    slim = razorlib.prune(model, inputs, flops=0.5)
    assert sum(dense_counts) == 1  # the experts' budget check reuses the allocation's count
    assert type(slim) is transformers.MixtralForCausalLM
    dense, cut = (get_model_complexity(m, inputs).flops for m in (model, slim))
    assert 0.45 < cut / dense <= 0.5  # the budget holds, though widths move by 8 at a time
    widths = [layer.mlp.experts.down_proj.shape[2] for layer in slim.model.layers]
    assert all(w % 8 == 0 and w < 64 for w in widths)  # grouped_mm needs multiples of 8
    hf.save_pruned(slim, tmp_path)  # per-layer widths go in a channel file
    again = hf.load_pruned(tmp_path)
    assert torch.equal(main_output(again, inputs), main_output(slim, inputs))


def gpt_oss():
    """Experts at unit scale: nonzero biases, and the gating's clamps acting."""
    torch.manual_seed(0)
    model = transformers.GptOssForCausalLM(transformers.GptOssConfig(
        **SMALL, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, head_dim=8,
        sliding_window=4)).eval()
    for layer in model.model.layers:
        for param in layer.mlp.experts.parameters():
            param.data.normal_(0, 1)
    return model


def test_gpt_oss_experts_prune_in_their_own_layout_and_reload(tmp_path):
    """Interleaved, transposed and biased, with a clamped SwiGLU: before, they stayed
    whole (an unknown ``GroupedMmBackward0``)."""
    model, inputs = gpt_oss(), token_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # nothing left unpruned, nothing the config misses
        slim = razorlib.prune(model, inputs, ratio=0.5)
    experts = slim.model.layers[0].mlp.experts
    assert type(experts).__name__ == 'GptOssExperts' and slim.config.intermediate_size == 16
    assert experts.gate_up_proj.shape == (4, 32, 32) and experts.gate_up_proj_bias.shape == \
        (4, 32) and experts.down_proj.shape == (4, 16, 32) and experts.intermediate_size == 16
    dense = model.model.layers[0].mlp.experts
    for e in range(4):  # gate and up columns interleaved, at the down rows' channels
        gate = kept_rows(experts.gate_up_proj[e, :, 0::2].t(), dense.gate_up_proj[e, :, 0::2].t())
        up = kept_rows(experts.gate_up_proj[e, :, 1::2].t(), dense.gate_up_proj[e, :, 1::2].t())
        down = kept_rows(experts.down_proj[e], dense.down_proj[e])
        assert gate == up == down == sorted(gate)
        assert torch.equal(experts.gate_up_proj_bias[e, 0::2],
                           dense.gate_up_proj_bias[e, 0::2][gate])
    slim.save_pretrained(tmp_path)
    again = transformers.GptOssForCausalLM.from_pretrained(tmp_path).eval()
    assert torch.equal(main_output(again, inputs), main_output(slim, inputs))


def test_a_layout_split_experts_does_not_compute_stays_whole_and_named():
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    class OwnGate(GptOssExperts):
        def _apply_gate(self, gate_up):
            return gate_up[..., ::2] * gate_up[..., 1::2]

    model = gpt_oss()
    for layer in model.model.layers:
        layer.mlp.experts.__class__ = OwnGate
    with pytest.warns(UserWarning, match=r'\[unknown-op\] GroupedMmBackward0'):
        slim = razorlib.prune(model, token_inputs(), ratio=0.5)
    assert slim.model.layers[0].mlp.experts.gate_up_proj.shape == (4, 32, 64)


def test_a_budget_no_width_per_layer_meets_is_refused():
    model, inputs = split_experts(mixtral(intermediate_size=64)), token_inputs()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, inputs)
    subnet = pruner.subnet_at(0.5)
    layers = ['model.layers.0.mlp.experts', 'model.layers.1.mlp.experts']
    tried = []
    kept = uniform_experts(pruner, subnet, layers, lambda s: tried.append(s) or len(tried) > 2)
    counts = [int(kept[f'{name}.experts.0.up_proj'].sum()) for name in layers]
    assert counts == [16, 16]  # 32 each, then both (the widest, tied) lose 8, twice
    with pytest.raises(ValueError, match=r'^the budget cannot be met with one width for the '
                       r'experts of each layer \(2 layers of experts at their narrowest still '
                       r'miss it\); ask for a larger budget\. Nothing was changed\.$'):
        uniform_experts(pruner, subnet, layers, lambda s: False)


@pytest.mark.parametrize('flops', [0.45, 0.5, 0.6])
def test_hf_prune_keeps_one_expert_width_down_the_stack_under_a_flops_budget(flops):
    """At 0.45 and 0.6 one layer's experts a step narrower already meet the budget: a
    search that narrowed one layer at a time left the two layers' widths apart, which
    the config's one ``intermediate_size`` cannot describe."""
    model, inputs = mixtral(intermediate_size=64), token_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # the config describes every width
        slim = hf.prune(model, inputs, flops=flops)
    dense, cut = (get_model_complexity(m, inputs).flops for m in (model, slim))
    assert cut / dense <= flops
    widths = {layer.mlp.experts.down_proj.shape[2] for layer in slim.model.layers}
    assert widths == {slim.config.intermediate_size} and slim.config.intermediate_size < 64


@pytest.mark.parametrize('dense,call,kept', [
    (20, dict(ratio=0.5), 8),  # 10 is no multiple of 8: grouped_mm could not run it
    (64, dict(ratio=0.1), 8),  # the narrowest multiple of 8
    (64, dict(ratio=0.85, max_ratio=0.2), 56),  # at least 80% stays: 51.2 up to 56
    (64, dict(ratio=0.5, round_to=16), 32),
])
def test_expert_widths_are_multiples_of_8_within_the_width_rule(dense, call, kept):
    model, inputs = mixtral(intermediate_size=dense), token_inputs()
    slim = razorlib.prune(model, inputs, **call)
    assert [layer.mlp.experts.intermediate_dim for layer in slim.model.layers] == [kept] * 2
    assert main_output(slim, inputs).shape == (2, 8, VOCAB)  # grouped_mm runs the widths


@pytest.mark.parametrize('importance', ['taylor', 'fisher', 'activation', 'apoz'])
def test_data_criteria_score_experts_no_token_of_the_data_reached(importance):
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(transformers.MixtralConfig(
        **SMALL, intermediate_size=32, num_local_experts=8, num_experts_per_tok=2)).eval()
    inputs = token_inputs()
    data = [({'input_ids': inputs['input_ids'][:1, :2]}, inputs['input_ids'][:1, :2])]
    slim = razorlib.prune(model, inputs, ratio=0.5, importance=importance, data=data,
                          loss_fn=lambda out, ids: out.logits.sum())
    assert [layer.mlp.experts.intermediate_dim for layer in slim.model.layers] == [16, 16]


@pytest.mark.parametrize('build', [lambda: mixtral(intermediate_size=32), qwen2_moe, qwen3_moe,
                                   olmoe, deepseek_v3],
                         ids=['mixtral', 'qwen2_moe', 'qwen3_moe', 'olmoe', 'deepseek_v3'])
def test_hidden_true_prunes_the_hidden_size_through_the_routers_and_reloads(build, tmp_path):
    """Before, the routers' ``reshape(-1, self.hidden_dim)`` failed the pruned run, so
    ``hidden=True`` kept the hidden size of every MoE model (RouterKind)."""
    model, inputs = build(), token_inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        slim = razorlib.prune(model, inputs, ratio=0.5, hidden=True)
    said = [str(w.message) for w in caught]
    assert not [m for m in said if 'unpruned' in m or 'prunes no hidden size' in m], said
    assert slim.model.embed_tokens.weight.shape == (VOCAB, 16)
    for layer in slim.model.layers:
        if not hasattr(layer.mlp, 'gate'):  # DeepSeek-V3's first layer is dense
            continue
        router = layer.mlp.gate
        assert router.weight.shape == (4, 16) and router.hidden_dim == 16
        assert not [b for b in router._buffers if 'mask' in b]  # the plan slices no mask
    assert main_output(slim, inputs).shape == (2, 8, VOCAB)
    hf.save_pruned(slim, tmp_path)  # OLMoE's config cannot describe its q/k norms' widths
    again = hf.load_pruned(tmp_path)
    assert torch.equal(main_output(again, inputs), main_output(slim, inputs))


def _plan(model, inputs, keep=()):
    pruner = L1NormPruner(ratio=0.5, except_start_keys=keep)
    pruner.prepare_from_supernet(model, inputs)
    return {gid: group.num_channels for gid, group in pruner.groups.prunable.items()}


@pytest.mark.parametrize('split', [True, False], ids=['split', 'fused'])
@pytest.mark.parametrize('build', [lambda: mixtral(intermediate_size=32), qwen2_moe, qwen3_moe,
                                   olmoe, deepseek_v3, gpt_oss, llama4],
                         ids=['mixtral', 'qwen2_moe', 'qwen3_moe', 'olmoe', 'deepseek_v3',
                              'gpt_oss', 'llama4'])
def test_a_shell_on_meta_plans_what_the_model_traced_on_its_values_does(
        build, split, monkeypatch):
    """A large MoE model is planned without its weights (docs/transformers.md): split
    experts route every token on meta, where the routing has no values, and fused ones
    run ``grouped_mm`` in float32, which torch's meta kernel refused.  The reference is
    traced on real values (the tracer would take meta for it too).  Llama 4 keeps its
    hidden size: pruned with it, v_proj's heads fail the masked-vs-slim run, which a
    model on meta cannot make (it has no values)."""
    import razorlib.pruning.structure as structure
    model, inputs = build(), token_inputs()
    with torch.device('meta'):
        shell = type(model)(model.config)
    if split:
        split_experts(model)
        split_experts(shell)
    keep = hf.hidden_size_keys(model) if build is llama4 else ()
    on_meta = _plan(shell, inputs, keep)
    monkeypatch.setattr(structure, 'trace', functools.partial(structure.trace, meta=False))
    assert on_meta == _plan(model, inputs, keep)
    assert any('.experts.' in gid for gid in on_meta) == split  # fused experts stay whole


def test_the_masked_model_computes_the_slim_one_and_the_router_keeps_every_expert():
    model, inputs = split_experts(mixtral(intermediate_size=32)), token_inputs()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, inputs)
    routers = [f'model.layers.{i}.mlp.gate' for i in range(2)]
    for router in routers:  # the experts' dim is no channel: topk picks among them
        owners = [g for g in pruner.groups.groups.values() if router in g.layers]
        assert owners and not any(g.prunable for g in owners)
    hidden = next(g for g in pruner.groups.prunable.values()
                  if all(r in g.consumers for r in routers))
    pruner.set_subnet(pruner.subnet_at(0.5))
    _, slim = deploy_checked(pruner, model, inputs)  # masked == slim, params as counted
    assert slim.model.layers[0].mlp.gate.weight.shape == (4, hidden.num_channels // 2)
    tokens = torch.zeros(16, 32)  # the masked router counts its kept inputs, as the slim one
    assert get_model_complexity(model.model.layers[0].mlp.gate, tokens).flops == 16 * 16 * 4
    assert get_model_complexity(slim.model.layers[0].mlp.gate, tokens[:, :16]).flops == \
        16 * 16 * 4


def test_a_router_plans_its_inputs_and_experts_with_its_per_expert_tensors():
    router = mixtral(intermediate_size=32).model.layers[0].mlp.gate
    router.register_buffer('e_score_correction_bias', torch.arange(4.))
    kind = RouterKind()
    assert type(kind_of(router)) is RouterKind
    plan = kind.plan_slice('gate', router, {'in': [1, 3]})
    assert plan.params['weight'].shape == (4, 2) and plan.attrs == {'hidden_dim': 2}
    plan = kind.plan_slice('gate', router, {'out': [0, 2]})  # the tracer reads dims from it
    assert torch.equal(plan.params['weight'], router.weight[[0, 2]])
    assert plan.buffers['e_score_correction_bias'].tolist() == [0., 2.]
    router.hidden_dim = 7
    assert kind.unsliceable(router) == "its hidden_dim (7) is not its weight's input width (32)"


class LinearChildRouter(nn.Module):
    """DBRX's layout: a router whose weight is an nn.Linear child's."""
    __module__ = 'transformers.models.fake.modeling_fake'

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 4, bias=False)

    def forward(self, x):
        return self.layer(x).softmax(-1).topk(2, -1)


class ScaledRouter(LinearChildRouter):
    """Gemma 4's: a scale of the hidden size of its own before its Linear child."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x):
        return self.layer(x * self.scale).topk(2, -1)


class ClassifierWeightRouter(LinearChildRouter):
    """LongCat-Flash's: ``F.linear`` on its child's weight, the child never called."""

    def forward(self, x):
        return torch.nn.functional.linear(x, self.layer.weight).topk(2, -1)


@pytest.mark.parametrize('router, width', [
    (LinearChildRouter, 4), (ScaledRouter, 4),
    (ClassifierWeightRouter, 8),  # a weight read outside its module's forward: kept whole
])
def test_a_router_without_a_weight_of_its_own_has_no_kind_and_is_traced_as_any(router, width):
    model = nn.Sequential(nn.Linear(6, 8), router()).eval()
    assert kind_of(model[1]) is None and type(kind_of(model[1].layer)) is LinearKind
    x = torch.randn(3, 6)
    assert get_model_complexity(model, x).flops == 3 * (6 * 8 + 8 * 4)  # counted once
    slim = razorlib.prune(model, x, ratio=0.5)
    assert slim[0].out_features == width and slim[1].layer.weight.shape == (4, width)
    if router is ScaledRouter:  # sliced as a bare parameter
        assert slim[1].scale.shape == (width, )


def test_a_subclass_of_a_transformers_router_is_a_router():
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    class MyRouter(Qwen3MoeTopKRouter):
        pass

    router = MyRouter(qwen3_moe().config)
    assert type(kind_of(router)) is RouterKind
