"""Hugging Face models from tiny configs: the one-call razorlib.prune with dict inputs, a
masked supernet that computes and counts what its slim model does, and transformers'
Conv1D (GPT-2) as a layer kind."""
import copy

import pytest
import torch
import torch.nn as nn
from hf_builders import MODELS, build, main_output, relative_error

import razorlib
from razorlib.layers import kind_of
from razorlib.pruning import L1NormPruner
from razorlib.utils import get_model_complexity

Conv1D = pytest.importorskip('transformers.pytorch_utils').Conv1D


@pytest.mark.parametrize('name', sorted(MODELS))
def test_one_call_prune_takes_dict_inputs_and_halves_every_mlp(name):
    model, inputs = build(name)
    slim = razorlib.prune(model, inputs, ratio=0.5)
    mlp_in = MODELS[name][2]
    modules = dict(model.named_modules())
    for i in range(model.config.num_hidden_layers):
        dense, pruned = modules[mlp_in.format(i=i)], slim.get_submodule(mlp_in.format(i=i))
        width = kind_of(dense).widths(dense)['out']
        assert kind_of(pruned).widths(pruned)['out'] == width // 2
    assert main_output(slim, inputs).shape == main_output(model, inputs).shape


@pytest.mark.parametrize('name', sorted(MODELS))
def test_masked_model_computes_and_counts_what_the_slim_model_does(name):
    model, inputs = build(name)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, inputs)
    assert len(pruner.groups.prunable) >= model.config.num_hidden_layers
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    masked_count = get_model_complexity(model, inputs)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    slim_params = sum(p.numel() for p in slim.parameters())
    assert masked_count.params == slim_params < sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize('name, embed', [('llama', 'model.embed_tokens'),
                                          ('gpt2', 'transformer.wte')])
def test_tied_embeddings_and_lm_head_stay_tied_and_whole(name, embed):
    model, inputs = build(name, tie_word_embeddings=True)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, inputs)
    assert pruner.get_space_id(embed) is None  # the hidden size is not pruned
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    masked_params = get_model_complexity(model, inputs).params
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert slim.lm_head.weight is slim.get_submodule(embed).weight
    assert slim.lm_head.weight.shape == model.lm_head.weight.shape
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
