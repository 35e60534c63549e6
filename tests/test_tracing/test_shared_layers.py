"""Layers that hold one parameter (a tied weight) prune alike on its dims
(``tracing/layer_params.tie_shared_layers``).

A decoder that holds the input embeddings' weight but reads a head of its own width
(BERT's masked-LM head) was traced with that head in a group of its own: pruning sliced
the decoder's view of the tensor and not the embeddings', and ``slim_model`` refused the
plan ("tied parameters would be sliced apart"), so ``razorlib.prune`` failed on the model.
"""
import torch
import torch.nn as nn

from helpers import Traced
from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner

IDS = torch.randint(0, 10, (2, 5), generator=torch.Generator().manual_seed(0))


class TiedHead(nn.Module):
    """Embeddings (10 x 8) -> residual body -> a head -> a decoder holding the
    embeddings' weight (BERT's masked-LM head, small); with ``call_decoder=False`` the
    decoder is never called and the hidden states are the output."""

    def __init__(self, call_decoder: bool = True):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 8)
        self.decoder = nn.Linear(8, 10)
        self.decoder.weight = self.embed.weight
        self.call_decoder = call_decoder

    def forward(self, ids):
        h = self.embed(ids)
        h = h + self.body(h)
        return self.decoder(torch.relu(self.head(h))) if self.call_decoder else self.head(h)


def _model(**kwargs):
    torch.manual_seed(0)
    return TiedHead(**kwargs).eval()


def _groups(traced):
    return {gid: (group.layers, group.prunable, [str(r) for r in group.frozen_reasons])
            for gid, group in traced.groups.groups.items()}


def test_a_decoder_holding_the_embeddings_weight_binds_its_inputs_to_the_hidden_size():
    """head's outputs are the decoder's inputs, dim 1 of the tensor, which is the
    embeddings' hidden size: one group.  The decoder's outputs (dim 0, the vocabulary)
    are no channels of the embeddings, and a model output anyway."""
    assert _groups(Traced(_model(), IDS)) == {
        'embed': (['embed', 'body', 'head'], True, []),
        'decoder': (['decoder'], False, [
            '[fixed] decoder.weight: its dim 0 is shared with embed.weight, which holds no '
            'channels there that pruning slices',
            '[output] ViewBackward0: channels of a model output; after decoder'])}


def test_the_tied_model_prunes_alike_and_the_slim_model_computes_the_masked_one():
    model = _model()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, IDS)
    assert list(pruner.groups.prunable) == ['embed']
    slim = sample_and_deploy(pruner, model, IDS)
    assert slim.decoder.weight is slim.embed.weight  # still one tensor
    assert slim.decoder.in_features == slim.embed.embedding_dim == slim.head.out_features < 8


def test_a_dim_no_other_holder_slices_freezes_the_axis_naming_the_holder():
    """The decoder is never called: its dims hold no traced channels, so the
    embeddings' hidden size, dim 1 of their shared tensor, cannot go."""
    traced = Traced(_model(call_decoder=False), IDS)
    group = traced.group_of('embed')
    assert not group.prunable
    assert '[fixed] embed.weight: its dim 1 is shared with decoder.weight, which holds no ' \
        'channels there that pruning slices' in [str(r) for r in group.frozen_reasons]
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(_model(call_decoder=False), IDS)
    assert 'embed' not in pruner.groups.prunable
