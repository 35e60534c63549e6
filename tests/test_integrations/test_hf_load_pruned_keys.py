"""load_pruned goes through transformers' own key handling for the model class, and never
returns a model with weights it did not load.

GPT-NeoX saves its head as ``embed_out`` and transformers renames it back to ``lm_head``
on load through a checkpoint conversion mapping, which it skips for custom code
(``PreTrainedModel.is_custom_code``: a class whose module is not ``transformers.*``).  The
class load_pruned slices the model in must therefore read as the transformers class, or
the head is freshly initialised with only a logged table to tell."""
import pytest
import torch

import razorlib
from razorlib.integrations.transformers import CHANNELS_FILE, load_pruned, prune, save_pruned

transformers = pytest.importorskip('transformers')
safetensors_torch = pytest.importorskip('safetensors.torch')

VOCAB = 100


def gpt_neox() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        vocab_size=VOCAB, rotary_pct=0.25, bos_token_id=0,
                                        eos_token_id=0)
    return transformers.GPTNeoXForCausalLM(config).eval()


def inputs() -> dict:
    generator = torch.Generator().manual_seed(0)
    return {'input_ids': torch.randint(1, VOCAB, (2, 8), generator=generator)}


def logits(model: torch.nn.Module, x: dict) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(**x).logits


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


PRUNERS = {
    'razorlib.prune': lambda model, x: razorlib.prune(model, x, ratio=0.5),
    'integration prune': lambda model, x: prune(model, x, ratio=0.5),
    'integration prune, gqa=query': lambda model, x: prune(model, x, ratio=0.5, gqa='query'),
}


@pytest.fixture
def saved_slim(tmp_path):
    """A pruned GPT-NeoX saved with a channel file, its inputs and its logits."""
    x = inputs()
    with pytest.warns(UserWarning, match='save_pruned'):
        slim = razorlib.prune(gpt_neox(), x, ratio=0.5)
    assert not save_pruned(slim, tmp_path).exact
    assert (tmp_path / CHANNELS_FILE).exists()
    return tmp_path, x, logits(slim, x)


@pytest.mark.filterwarnings('ignore::UserWarning')
@pytest.mark.parametrize('how', sorted(PRUNERS))
def test_pruned_gpt_neox_reloads_its_head(how, tmp_path):
    x = inputs()
    slim = PRUNERS[how](gpt_neox(), x)
    assert slim.gpt_neox.layers[0].attention.query_key_value.out_features < 3 * 64
    sync = save_pruned(slim, tmp_path)
    assert (tmp_path / CHANNELS_FILE).exists() == (not sync.exact)
    assert 'embed_out.weight' in safetensors_torch.load_file(str(tmp_path / 'model.safetensors'))
    again, info = load_pruned(tmp_path, output_loading_info=True)
    assert type(again) is transformers.GPTNeoXForCausalLM
    assert not info['missing_keys'] and not info['unexpected_keys']
    assert torch.equal(again.lm_head.weight, slim.lm_head.weight)
    assert relative_error(logits(again, x), logits(slim, x)) <= 1e-6


def test_dense_gpt_neox_reloads_without_a_channel_file(tmp_path):
    model, x = gpt_neox(), inputs()
    assert save_pruned(model, tmp_path).exact
    assert not (tmp_path / CHANNELS_FILE).exists()
    again = load_pruned(tmp_path)
    assert relative_error(logits(again, x), logits(model, x)) <= 1e-6


def doctor(folder, edit) -> None:
    """Rewrite ``folder``'s safetensors checkpoint with ``edit(state dict)``."""
    path = folder / 'model.safetensors'
    tensors = safetensors_torch.load_file(str(path))
    edit(tensors)
    safetensors_torch.save_file(tensors, str(path), metadata={'format': 'pt'})


def test_a_checkpoint_lacking_a_weight_is_refused(saved_slim):
    folder, _, _ = saved_slim
    key = 'gpt_neox.layers.1.attention.dense.weight'
    doctor(folder, lambda tensors: tensors.pop(key))
    with pytest.raises(ValueError, match=rf'(?s){folder}.*missing.*{key}'):
        load_pruned(folder)


def test_a_checkpoint_with_a_renamed_weight_is_refused(saved_slim):
    folder, _, _ = saved_slim
    doctor(folder, lambda tensors: tensors.update(head=tensors.pop('embed_out.weight')))
    with pytest.raises(ValueError, match=r'(?s)missing.*lm_head\.weight.*not in the model.*head'):
        load_pruned(folder)


def test_an_unused_checkpoint_weight_is_refused(saved_slim):
    folder, _, _ = saved_slim
    doctor(folder, lambda tensors: tensors.update(extra=torch.zeros(3)))
    with pytest.raises(ValueError, match='not in the model: extra'):
        load_pruned(folder)


def test_the_plain_path_is_checked_too(tmp_path):
    assert save_pruned(gpt_neox(), tmp_path).exact  # no channel file: from_pretrained
    key = 'gpt_neox.layers.0.mlp.dense_h_to_4h.bias'
    doctor(tmp_path, lambda tensors: tensors.pop(key))
    with pytest.raises(ValueError, match=key):
        load_pruned(tmp_path)


def test_the_untouched_checkpoint_still_loads(saved_slim):
    folder, x, expected = saved_slim
    assert relative_error(logits(load_pruned(folder), x), expected) <= 1e-6
