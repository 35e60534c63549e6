"""A Hugging Face model timed on onnxruntime: its exported graph is checked against the
model, and a batch of token ids alone (nothing to shuffle) is checked by the outputs'
number and shapes only."""
import torch
from hf_builders import gpt2, token_inputs

from razorlib.pruning.runtimes import OnnxRuntime


def test_a_left_padded_batch_of_token_ids_is_timed_not_refused():
    """The exporters may differ at a fully masked row (GPT-2's dynamo graph and the model
    by 0.09 at the padded position, 1e-7 elsewhere): with integer inputs only, the values
    cannot tell a trace frozen into constants anyway, so they are not compared."""
    torch.manual_seed(0)
    model = gpt2().eval()
    runtime = OnnxRuntime(warmup=0, repeat=1, cache_dir=False)
    padded = {**token_inputs(1, 6), 'attention_mask': torch.tensor([[0, 1, 1, 1, 1, 1]])}
    runtime.latency([model], token_inputs(1, 6))  # TorchScript fails: the class goes to dynamo
    (latency, ) = runtime.latency([model], padded)
    assert latency > 0
