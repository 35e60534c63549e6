"""SymmetricHistogram growth by factors past int64: a later batch far beyond the first
(an all-zero first batch, an attention mask's -3.4e38) keeps the range the data has."""
import pytest
import torch

from razorlib.ir import QuantizationProperty as P
from razorlib.ir import TensorQuantizationConfig
from razorlib.quantization import build_observer
from razorlib.quantization.observers import SymmetricHistogram

MASKED = torch.finfo(torch.float32).min


@pytest.mark.parametrize('first,later', [(torch.zeros(8), 1e7), (torch.ones(8), MASKED)])
def test_the_limit_grows_to_the_largest_magnitude(first, later):
    # the growth factor (1e19, 3.4e38) overflowed int64: the limit went negative
    histogram = SymmetricHistogram(bins=64)
    histogram.add(first[None])
    histogram.add(torch.tensor([[later, 0.5]]))
    assert histogram.limit.item() >= abs(later)
    assert histogram.limit.item() == pytest.approx(abs(later), rel=1e-6)
    # every earlier value now lies in one of the two bins around 0
    assert histogram.counts.sum().item() == 10
    assert histogram.counts[0, 32].item() == 9
    assert histogram.counts[0, 0 if later < 0 else 63].item() == 1


@pytest.mark.parametrize('name', ['percentile', 'kl', 'mse'])
@pytest.mark.parametrize('symmetric', [True, False])
def test_a_range_after_an_all_zero_batch_holds_the_data(name, symmetric):
    # percentile and kl rendered 1.2e-7 (asymmetric) or 9.2e6 (symmetric) for [-1e8, 1e8]
    policy = P.PER_TENSOR | P.LINEAR | (P.SYMMETRICAL if symmetric else P.ASYMMETRICAL)
    config = TensorQuantizationConfig(policy, quant_min=-128 if symmetric else 0,
                                      quant_max=127 if symmetric else 255,
                                      observer_algorithm=name)
    observer = build_observer(config)
    observer.observe(torch.zeros(8))
    observer.observe(torch.linspace(-1e8, 1e8, 1001))
    observer.render(config)
    top = (config.quant_max - config.offset.item()) * config.scale.item()
    assert 0.99e8 <= top <= 1.01e8
