"""razorlib.utils.inputs.random_batch: example batches a model can run."""
import pytest
import torch
import torch.nn as nn

from razorlib.utils import get_model_complexity
from razorlib.utils.inputs import random_batch


def small_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3))


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16, torch.float64])
def test_the_batch_is_in_the_models_floating_dtype(dtype):
    model = small_cnn().to(dtype)
    batch = random_batch(model, (3, 8, 8), batch_size=2)
    assert batch.dtype == dtype
    # the same draw as for a float32 model, rounded
    assert torch.equal(batch, random_batch(small_cnn(), (3, 8, 8), batch_size=2).to(dtype))


def test_a_bfloat16_model_is_counted_on_its_random_batch():
    # what the resource hook and a trace without example inputs do; a float32 batch
    # failed in the first conv ('Input type (float) and bias type (c10::BFloat16)')
    model = small_cnn().to(torch.bfloat16)
    counted = get_model_complexity(model, random_batch(model, (3, 16, 16)))
    assert counted == get_model_complexity(small_cnn(), random_batch(small_cnn(), (3, 16, 16)))


def test_a_model_without_floating_parameters_gets_float32():
    holder = nn.Module()
    holder.index = nn.Parameter(torch.zeros(2, dtype=torch.long), requires_grad=False)
    assert random_batch(holder, (2, )).dtype == torch.float32
    assert random_batch(nn.Identity(), (2, )).dtype == torch.float32
