"""FLOPs of recurrent layers against hand-computed counts: the multiply-accumulates of
their weight products, per token, layer and direction (a gate block of an LSTM is
4 x hidden rows, of a GRU 3 x hidden, of an RNN hidden)."""
import pytest
import torch
import torch.nn as nn
from torch.nn.utils import parametrizations
from torch.nn.utils.rnn import pack_padded_sequence

import razorlib
from razorlib.utils import get_model_complexity

LSTM_STEP = 64 * 8 + 64 * 16  # LSTM(8 -> 16): input-to-hidden and hidden-to-hidden
GRU_STEP = 48 * 8 + 48 * 16
RNN_STEP = 16 * 8 + 16 * 16


def flops_of(module, *inputs):
    per = {}
    total = get_model_complexity(module, inputs, per_module=per)
    assert per == {'': total.flops}
    return total.flops


@pytest.mark.parametrize('layer, x, macs', [
    (nn.LSTM(8, 16, batch_first=True), torch.randn(2, 5, 8), 2 * 5 * LSTM_STEP),  # 15360
    (nn.LSTM(8, 16), torch.randn(5, 2, 8), 2 * 5 * LSTM_STEP),
    (nn.LSTM(8, 16), torch.randn(5, 8), 5 * LSTM_STEP),  # unbatched
    (nn.GRU(8, 16, batch_first=True), torch.randn(2, 5, 8), 2 * 5 * GRU_STEP),
    (nn.RNN(8, 16, batch_first=True), torch.randn(2, 5, 8), 2 * 5 * RNN_STEP),
    (nn.RNN(8, 16, nonlinearity='relu', bias=False), torch.randn(5, 2, 8), 2 * 5 * RNN_STEP),
    # layer 1 reads both directions of layer 0: 64 x 32 input weights, each direction
    (nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True), torch.randn(2, 5, 8),
     2 * 5 * 2 * (LSTM_STEP + 64 * 32 + 64 * 16)),
    # the projection: hidden-to-hidden reads the 4 projected entries, then 4 x 16 weights
    (nn.LSTM(8, 16, proj_size=4, batch_first=True), torch.randn(2, 5, 8),
     2 * 5 * (64 * 8 + 64 * 4 + 4 * 16)),
    (nn.LSTMCell(8, 16), torch.randn(2, 8), 2 * LSTM_STEP),
    (nn.GRUCell(8, 16), torch.randn(2, 8), 2 * GRU_STEP),
    (nn.RNNCell(8, 16), torch.randn(2, 8), 2 * RNN_STEP),
    (nn.LSTMCell(8, 16), torch.randn(8), LSTM_STEP),  # unbatched
])
def test_recurrent_layers_count_their_weight_products(layer, x, macs):
    assert flops_of(layer, x) == macs


@pytest.mark.parametrize('bidirectional', [False, True])
def test_a_packed_sequence_costs_the_tokens_it_holds(bidirectional):
    lstm = nn.LSTM(8, 16, batch_first=True, bidirectional=bidirectional)
    packed = pack_padded_sequence(torch.randn(2, 5, 8), torch.tensor([5, 3]), batch_first=True)
    assert flops_of(lstm, packed) == (5 + 3) * LSTM_STEP * (2 if bidirectional else 1)


def test_the_hidden_state_given_or_the_input_by_keyword_changes_nothing():
    lstm, x = nn.LSTM(8, 16, batch_first=True), torch.randn(2, 5, 8)
    state = (torch.zeros(1, 2, 16), torch.zeros(1, 2, 16))
    assert flops_of(lstm, x, state) == 2 * 5 * LSTM_STEP
    assert get_model_complexity(lstm, {'input': x}).flops == 2 * 5 * LSTM_STEP


def test_an_lstm_counts_what_the_same_lstm_built_from_linear_layers_counts():
    """torch's quantizable LSTM runs its gates as nn.Linear layers, which the Linear kind
    counts; the fused nn.LSTM must cost the same."""
    fused = nn.LSTM(8, 16, num_layers=2, batch_first=True)
    built = torch.ao.nn.quantizable.LSTM(8, 16, num_layers=2, batch_first=True)
    x = torch.randn(2, 5, 8)
    assert flops_of(fused, x) == get_model_complexity(built, x).flops == \
        2 * 5 * (LSTM_STEP + 64 * 16 + 64 * 16)


def test_a_weight_under_weight_norm_is_counted():
    lstm = parametrizations.weight_norm(nn.LSTM(8, 16, batch_first=True), 'weight_hh_l0')
    assert flops_of(lstm, torch.randn(2, 5, 8)) == 2 * 5 * LSTM_STEP


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.lstm = nn.Embedding(10, 8), nn.LSTM(8, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, ids):
        return self.head(self.lstm(self.embed(ids))[0])


def test_the_recurrent_compute_is_in_a_model_total_under_its_name():
    per = {}
    total = get_model_complexity(Tagger(), torch.randint(0, 10, (2, 5)), per_module=per)
    assert per == {'embed': 0, 'lstm': 2 * 5 * LSTM_STEP, 'head': 2 * 5 * 16 * 3}
    assert total.flops == sum(per.values())


class MlpThenLstm(nn.Module):
    """A prunable MLP before an LSTM whose channels the tracer freezes."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 32), nn.Linear(32, 8)
        self.lstm, self.head = nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.lstm(self.fc2(self.fc1(x).relu()))[0])


def test_a_flops_budget_is_a_fraction_of_the_model_with_its_recurrent_compute():
    torch.manual_seed(0)
    model, x = MlpThenLstm().eval(), torch.randn(2, 5, 8)
    dense = get_model_complexity(model, x).flops
    assert dense == 2 * 5 * (8 * 32 + 32 * 8 + LSTM_STEP + 16 * 4)
    per = {}
    pruned = get_model_complexity(razorlib.prune(model, x, flops=0.8), x, per_module=per).flops
    assert per['lstm'] == 2 * 5 * LSTM_STEP and pruned <= 0.8 * dense
