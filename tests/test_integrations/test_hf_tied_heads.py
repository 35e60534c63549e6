"""BERT with a language-model head prunes: its decoder holds the input embeddings'
weight and reads the prediction head's own width, which the trace now binds to the hidden
size (``tracing/layer_params.tie_shared_layers``).  Before, ``razorlib.prune`` raised
"tied parameters would be sliced apart" on BertForMaskedLM and BertLMHeadModel."""
import copy
import warnings

import pytest
import torch
from hf_builders import VOCAB, main_output, relative_error, token_inputs

from razorlib.integrations.transformers import load_pruned, prune, save_pruned

transformers = pytest.importorskip('transformers')


@pytest.mark.parametrize('cls', ['BertForMaskedLM', 'BertLMHeadModel'])
def test_bert_with_a_language_model_head_prunes_and_keeps_its_tie(cls, tmp_path):
    torch.manual_seed(0)
    model = getattr(transformers, cls)(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, is_decoder=cls == 'BertLMHeadModel')).eval()
    inputs = token_inputs()
    for hidden, width in ((False, 32), (True, 16)):  # the head follows the hidden size
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # BERT's head widths: the config cannot say
            slim = prune(copy.deepcopy(model), inputs, ratio=0.5, hidden=hidden)
        embeddings = slim.bert.embeddings.word_embeddings
        assert slim.cls.predictions.decoder.weight is embeddings.weight
        assert slim.cls.predictions.transform.dense.out_features == width
        assert embeddings.embedding_dim == width
        assert slim.bert.encoder.layer[0].intermediate.dense.out_features == 32
    save_pruned(slim, tmp_path)
    again = load_pruned(tmp_path)
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-5
    assert again.cls.predictions.decoder.weight is again.bert.embeddings.word_embeddings.weight
