"""MiniCPM3 (multi-head latent attention; embeddings, residual branches and logits scaled
by config fields): the hidden size and the query's low rank prune, the masked supernet
computes and counts what the slim model does, and the rewritten config keeps the logits
divisor ``hidden_size / dim_model_base``, so ``from_pretrained`` reloads the slim model."""
import copy

import pytest
import torch
from hf_builders import main_output, minicpm3, relative_error, token_inputs

from razorlib.integrations.transformers import (CHANNELS_FILE, load_pruned, prune, save_pruned,
                                                sync_config)
from razorlib.integrations.transformers import config as config_module
from razorlib.pruning import L1NormPruner
from razorlib.utils import get_model_complexity

transformers = pytest.importorskip('transformers')


def _model(**overrides):
    torch.manual_seed(0)
    return minicpm3(**overrides).eval()


def _masked(model, inputs) -> L1NormPruner:
    """A pruner that has masked half of ``model``'s channels, the hidden size's too."""
    pruner = L1NormPruner(ratio=0.5, except_start_keys=())
    pruner.prepare_from_supernet(model, inputs)
    pruner.set_subnet(pruner.sample_subnet())
    return pruner


def test_masked_model_computes_and_counts_what_the_slim_model_does():
    model, inputs = _model(), token_inputs()
    dense = main_output(model, inputs)
    pruner = _masked(model, inputs)
    masked = main_output(model, inputs)
    masked_params = get_model_complexity(model, inputs).params
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert slim.model.norm.weight.shape == (32, )
    assert slim.model.layers[0].self_attn.q_a_proj.weight.shape == (16, 32)
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    assert relative_error(masked, dense) > 1e-2
    assert masked_params == sum(p.numel() for p in slim.parameters())


@pytest.mark.parametrize('hidden', [False, True], ids=['hidden-whole', 'hidden-pruned'])
def test_the_config_says_the_slim_widths_and_reloads_with_from_pretrained(hidden, tmp_path):
    model, inputs = _model(), token_inputs()
    with pytest.warns(UserWarning, match='normalises over fewer channels'):
        slim = prune(model, inputs, ratio=0.5, hidden=hidden)
    config = slim.config
    # 32 / 8 divides the hidden states by 4, as 64 / 16 did
    widths = (32, 8) if hidden else (64, 16)
    assert (config.hidden_size, config.dim_model_base, config.logits_scaling) == widths + (4, )
    assert (config.q_lora_rank, config.kv_lora_rank, config.intermediate_size) == (16, 16, 64)
    assert save_pruned(slim, tmp_path).exact
    assert not (tmp_path / CHANNELS_FILE).exists()
    again = type(model).from_pretrained(tmp_path).eval()
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


def test_a_logits_divisor_no_whole_field_keeps_leaves_the_hidden_size_to_the_channel_file(
        tmp_path):
    # 64 / 5: hidden 32 would need dim_model_base 2.5, so the config keeps hidden 64
    model, inputs = _model(dim_model_base=5), token_inputs()
    with pytest.warns(UserWarning, match=r'config cannot describe .* save it with '
                      'razorlib.integrations.transformers.save_pruned'):
        slim = prune(model, inputs, ratio=0.5, hidden=True)
    assert (slim.config.hidden_size, slim.config.dim_model_base) == (64, 5)
    assert slim.model.norm.weight.shape == (32, )
    assert not save_pruned(slim, tmp_path).exact
    again = load_pruned(tmp_path).eval()
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


def test_a_config_field_the_forward_reads_is_not_rewritten_silently(monkeypatch):
    # without the rule that scales dim_model_base with it, hidden_size=32 would halve the
    # logits divisor: the forward run before and after the rewrite catches it
    monkeypatch.setattr(config_module, 'HIDDEN_RATIO_FIELDS', ())
    with pytest.raises(ValueError, match=r'reads its config in its forward: rewriting '
                       r'.*hidden_size=32.* changes its outputs.*prune with hidden=False'):
        prune(_model(), token_inputs(), ratio=0.5, hidden=True)


def test_sync_config_scales_the_logits_divisor_with_the_hidden_size():
    model, inputs = _model(), token_inputs()
    pruner = _masked(model, inputs)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert sync_config(slim).changed == {
        'intermediate_size': (128, 64), 'q_lora_rank': (32, 16), 'hidden_size': (64, 32),
        'dim_model_base': (16, 8)}
