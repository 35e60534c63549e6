"""ActivationMagnitudeImportance ('wanda'): |W| column sums times the input channels'
activation norms, on nets computed by hand, per head on a small Llama, and through
razorlib.prune; TaylorImportance from a few batches on the same Llama."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

import razorlib
from razorlib.pruning import ImportancePruner, build_importance
from razorlib.pruning.importance import ActivationMagnitudeImportance

# fc1 (2 -> 3) -> ReLU -> fc2 (3 -> 2): one group, fc1's 3 output channels ('0').
W1 = [[1., 0.], [0., 1.], [-4., -4.]]
W2 = [[1., -2., 10.], [3., 0., -10.]]
# fc2 reads relu(W1 x): [1, 2, 0], [2, 0, 0], [0, 2, 0] (channel 2 never fires).
X = torch.tensor([[1., 2.], [2., -1.], [0., 2.]])
DATA = [(X[:2], None), (X[2:], None)]


def mlp() -> nn.Module:
    net = nn.Sequential(nn.Linear(2, 3, bias=False), nn.ReLU(), nn.Linear(3, 2))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor(W1))
        net[2].weight.copy_(torch.tensor(W2))
    return net.eval()


def hf():
    """tests/test_integrations/hf_builders, imported by the tests that need transformers
    (it skips them without it) so that the others run anyway."""
    from test_integrations import hf_builders
    return hf_builders


def scores_of(model, importance, x, data=None, loss_fn=None):
    pruner = ImportancePruner(importance=importance)
    pruner.prepare_from_supernet(model, x)
    return pruner.score(data, loss_fn)


def test_scores_are_the_consumers_column_sums_times_the_activation_norms():
    # |W2| column sums [4, 2, 20]; norms over the 3 samples: [sqrt(5), sqrt(8), 0]
    scores = scores_of(mlp(), dict(type='wanda', normalize='none'), X, data=DATA)
    np.testing.assert_allclose(scores['0'], [4 * math.sqrt(5), 2 * math.sqrt(8), 0.])


def test_a_channel_the_data_never_excites_ranks_last_where_l1_ranks_it_first():
    l1 = scores_of(mlp(), 'l1', X)['0']
    wanda = scores_of(mlp(), 'wanda', X, data=DATA)['0']
    assert np.argsort(-l1)[0] == 2 and np.argsort(-wanda)[-1] == 2


def test_conv_inputs_are_normed_over_samples_and_positions():
    net = nn.Sequential(nn.Conv2d(2, 3, 1), nn.ReLU(), nn.Conv2d(3, 2, 3)).eval()
    x = torch.randn(2, 2, 5, 5)
    scores = scores_of(net, dict(type='wanda', normalize='none'), x, data=[(x, None)])
    with torch.no_grad():
        norms = net[1](net[0](x)).pow(2).sum((0, 2, 3)).sqrt()
    columns = net[2].weight.detach().abs().sum((0, 2, 3))
    np.testing.assert_allclose(scores['0'], (columns * norms).numpy(), rtol=1e-6)


def test_llama_heads_score_the_o_proj_columns_of_their_query_heads():
    model, inputs = hf().build('llama')
    scores = scores_of(model, dict(type='wanda', normalize='none'), inputs,
                       data=[(inputs, None)])
    seen = {}
    block = model.model.layers[0]
    hooks = [block.self_attn.o_proj.register_forward_pre_hook(
                 lambda m, args: seen.setdefault('o', args[0].detach())),
             block.mlp.down_proj.register_forward_pre_hook(
                 lambda m, args: seen.setdefault('down', args[0].detach()))]
    with torch.no_grad():
        model(**inputs)
    for hook in hooks:
        hook.remove()

    def wanda(module, x):
        return module.weight.abs().sum(0) * x.reshape(-1, x.shape[-1]).pow(2).sum(0).sqrt()

    heads = scores['model.layers.0.self_attn.v_proj']
    kv_heads = model.config.num_key_value_heads
    assert heads.shape == (kv_heads, )  # a kv head is one class with its query heads
    per_head = wanda(block.self_attn.o_proj, seen['o']).reshape(kv_heads, -1).sum(1)
    np.testing.assert_allclose(heads, per_head.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(scores['model.layers.0.mlp.up_proj'],
                               wanda(block.mlp.down_proj, seen['down']).detach().numpy(),
                               rtol=1e-5)


def slim_widths(slim):
    attention, mlp_block = slim.model.layers[0].self_attn, slim.model.layers[0].mlp
    return (attention.o_proj.in_features, attention.k_proj.out_features,
            mlp_block.down_proj.in_features)


def test_prune_llama_by_wanda_halves_heads_and_mlp_and_runs():
    model, inputs = hf().build('llama')
    batch = (hf().token_inputs(seed=1), None)
    slim = razorlib.prune(model, inputs, ratio=0.5, importance='wanda', data=[batch, batch])
    # 4 query heads of 16 over 2 kv heads -> 1 kv head with its 2 query heads; MLP 128 -> 64
    assert slim_widths(slim) == (32, 16, 64)
    with torch.no_grad():
        assert slim(**inputs).logits.shape == (2, 8, 100)


@pytest.mark.parametrize('loss_fn, labels', [
    (lambda out, targets: out.logits.float().pow(2).mean(), False),
    (lambda out, targets: out.loss, True),
])
def test_taylor_scores_llama_from_a_few_batches(loss_fn, labels):
    model, inputs = hf().build('llama')
    batches = [hf().token_inputs(seed=s) for s in (1, 2)]
    data = [({**b, 'labels': b['input_ids']} if labels else b, None) for b in batches]
    slim = razorlib.prune(model, inputs, ratio=0.5, importance='taylor', data=data,
                          loss_fn=loss_fn)
    assert slim_widths(slim) == (32, 16, 64)
    with torch.no_grad():
        assert slim(**inputs).logits.shape == (2, 8, 100)


def test_taylor_without_a_loss_fn_on_an_hf_model_says_what_to_pass():
    model, inputs = hf().build('llama')
    with pytest.raises(TypeError, match=r'the model returned a CausalLMOutputWithPast, the '
                       r'targets are None: pass loss_fn=.*out\.loss'):
        razorlib.prune(model, inputs, ratio=0.5, importance='taylor',
                       data=[(hf().token_inputs(seed=1), None)])


def test_the_alias_builds_it_and_it_needs_data():
    built = build_importance(dict(type='wanda', normalize='lamp'))
    assert isinstance(built, ActivationMagnitudeImportance)
    assert built.roles == ('in', ) and built.needs_data
    assert isinstance(build_importance('ActivationMagnitudeImportance'),
                      ActivationMagnitudeImportance)
    with pytest.raises(ValueError, match="'wanda' is computed from data: pass data="):
        scores_of(mlp(), 'wanda', X)


class Skippable(nn.Module):
    """fc1 -> ReLU -> fc2, or fc1 alone when ``skip``: data that never reaches fc2."""

    def __init__(self):
        super().__init__()
        self.net = mlp()

    def forward(self, x, skip=False):
        return self.net[0](x) if skip else self.net(x)


def test_batches_that_reach_no_consumer_are_refused():
    with pytest.raises(RuntimeError, match="'wanda': no consumer of a prunable group ran"):
        scores_of(Skippable(), 'wanda', X, data=[(dict(x=X, skip=True), None)])
