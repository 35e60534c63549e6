"""Taylor and GroupFisher with ``layerwise=True`` on a transformers Llama: the decoder
layers run under activation checkpointing, the scores are those of the whole forward,
and the graph held across the forward shrinks to the embeddings, final norm and head."""
import copy

import numpy as np
import pytest
import torch
from hf_builders import build, token_inputs
from saved_tensors import layerwise_scores

import razorlib

CRITERIA = [dict(type='taylor'), dict(type='fisher', normalize_by=None)]
LOSSES = {'logits': (lambda out, targets: out.logits.float().pow(2).mean(), False),
          'labels': (lambda out, targets: out.loss, True)}


def llama_and_batches(labels: bool):
    """A 4-layer Llama with a wide MLP and two batches of 16 tokens."""
    model, inputs = build('llama', num_hidden_layers=4, intermediate_size=512)
    batches = [token_inputs(length=16, seed=s) for s in (1, 2)]
    return model, inputs, [({**b, 'labels': b['input_ids']} if labels else b, None)
                           for b in batches]


@pytest.mark.parametrize('loss', sorted(LOSSES))
@pytest.mark.parametrize('cfg', CRITERIA, ids=lambda cfg: cfg['type'])
def test_llama_layerwise_scores_as_the_whole_forward_holding_a_fraction(cfg, loss):
    loss_fn, labels = LOSSES[loss]
    model, inputs, data = llama_and_batches(labels)
    whole, held, _ = layerwise_scores(cfg, model, inputs, data, loss_fn, False)
    layerwise, held_layerwise, scored = layerwise_scores(cfg, model, inputs, data, loss_fn, True)
    assert whole.keys() == layerwise.keys() and len(whole) == 9  # 4 x (heads, MLP), residual
    for gid in whole:
        np.testing.assert_allclose(layerwise[gid], whole[gid], rtol=1e-5)
    print(f'{cfg["type"]}, {loss}: layerwise holds {held_layerwise} of {held} bytes '
          f'({held_layerwise / held:.3f})')  # about 0.03: embeddings, final norm, head, loss
    assert held_layerwise < 0.1 * held
    assert all(p.grad is None for p in scored.parameters())
    assert not any('forward' in vars(layer) for layer in scored.model.layers)


def test_prune_llama_by_layerwise_taylor_as_without():
    loss_fn, _ = LOSSES['logits']
    model, inputs, data = llama_and_batches(labels=False)
    slim = [razorlib.prune(copy.deepcopy(model), inputs, ratio=0.5, data=data, loss_fn=loss_fn,
                           importance=dict(type='taylor', layerwise=layerwise))
            for layerwise in (False, True)]
    assert slim[1].model.layers[0].mlp.down_proj.in_features == 256
    assert str(slim[0]) == str(slim[1])
    with torch.no_grad():
        torch.testing.assert_close(slim[1](**inputs).logits, slim[0](**inputs).logits)
