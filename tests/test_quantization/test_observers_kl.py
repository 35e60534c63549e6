"""The KL observer on distributions TensorRT's entropy calibration gets wrong.

Inputs with few distinct values (an image's gray levels) leave most histogram bins empty.
There TensorRT's divergence is zero at a threshold that clips almost everything, so the
search must charge the clipped mass, and a value and its negation must fall in the same
``|x|`` bin.  Where the divergence is flat within its noise, the squared error decides.
"""
import pytest
import torch
from torch import nn

from razorlib.datasets import DigitsDataset
from razorlib.ir import QuantizationProperty as P
from razorlib.ir import TensorQuantizationConfig
from razorlib.quantization import QuantExecutor, quantize_torch_model, snr_db
from razorlib.quantization.observers import KLObserver, SymmetricHistogram, kl_threshold_bin


def kl_threshold(batches, config=None, **options):
    observer, config = KLObserver(**options), config or TensorQuantizationConfig()
    for batch in batches:
        observer.observe(batch)
    observer.render(config)
    return config.scale.item() * config.quant_max


def gray_levels(count=100000, seed=0):
    """Digits-like pixels: 17 gray levels in [-1, 1], 58% of them the background -1."""
    generator = torch.Generator().manual_seed(seed)
    levels = torch.linspace(-1.0, 1.0, 17)
    weights = torch.cat([torch.tensor([58.0]), torch.full((16, ), 42.0 / 16)])
    return levels[torch.multinomial(weights, count, replacement=True, generator=generator)]


def test_few_distinct_values_keep_their_whole_range():
    # TensorRT's search kept 0.125: the clipped 95% folded into one bin that was, alone,
    # the whole reference distribution, so P == Q and the divergence was 0.
    assert kl_threshold([gray_levels()]) == pytest.approx(1.0, abs=1e-3)
    assert kl_threshold([gray_levels(seed=1), 0.5 * gray_levels(seed=2)]) == pytest.approx(
        1.0, abs=1e-3)
    assert kl_threshold([gray_levels()], TensorQuantizationConfig(
        P.PER_TENSOR | P.LINEAR | P.ASYMMETRICAL, quant_min=0, quant_max=255)) == pytest.approx(
            2.0, abs=1e-2)  # [-1, 1] in 255 steps


def test_a_value_and_its_negation_share_a_magnitude_bin():
    histogram = SymmetricHistogram(bins=16)
    histogram.add(torch.tensor([[-1.0, -0.25, 0.25, 0.5, 1.0]]))
    assert histogram.magnitude_counts().tolist() == [[0, 0, 2, 0, 1, 0, 0, 2]]


def test_clipping_a_lone_spike_is_charged():
    # A spike in the first bin the search may keep and a heavier one far out: keeping
    # only the first made P and Q one bin each, divergence 0 (TensorRT's choice).
    counts = torch.zeros(2048, dtype=torch.double)
    counts[130], counts[2047] = 100.0, 900.0
    assert kl_threshold_bin(counts, 128) == 2048


def test_bins_past_the_largest_value_are_no_candidates():
    counts = torch.zeros(2048, dtype=torch.double)
    counts[:300] = 1.0  # flat: every candidate below 300 clips
    assert 295 <= kl_threshold_bin(counts, 128) <= 300
    assert kl_threshold_bin(counts[:100], 128) == 100  # everything fits in 128 levels
    assert kl_threshold_bin(torch.zeros(2048), 128) == 0


def squared_error(values, threshold):
    step = threshold / 127
    return (values - (values.clamp(max=threshold) / step).round() * step).square().sum().item()


def test_a_divergence_flat_within_its_noise_leaves_the_choice_to_the_squared_error():
    # 2,000 half-normal values: past 3 sigma the divergences differ by less than their
    # noise; TensorRT's argmin lands anywhere in there, the least squared error does not.
    values = torch.randn(2000, generator=torch.Generator().manual_seed(0)).abs()
    width = float(values.max()) / 2048
    kept = kl_threshold_bin(torch.histc(values, 2048, 0, float(values.max())), 128)
    errors = {stop: squared_error(values, stop * width) for stop in range(1200, 2049, 8)}
    assert squared_error(values, kept * width) <= 1.1 * min(errors.values())


class DigitsCNN(nn.Module):
    """conv, BN, ReLU, pool, adaptive average pool, flatten, linear."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

    def forward(self, x):
        return self.features(x)


@pytest.fixture(scope='module')
def trained_digits_cnn():
    data = DigitsDataset('train', in_channels=1)
    images = torch.stack([item['inputs'] for item in data]) * 2 - 1
    labels = torch.tensor([int(item['data_samples'].gt_label) for item in data])
    torch.manual_seed(0)
    model = DigitsCNN()
    optimizer = torch.optim.Adam(model.parameters(), 1e-2)
    for _ in range(4):
        for index in torch.randperm(len(images)).split(64):
            loss = nn.functional.cross_entropy(model(images[index]), labels[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval(), images


def int8_logits(model, images, observer):
    calibration = list(images[:480].split(120))
    graph = quantize_torch_model(model, calibration, calibration[0], 'TRT_INT8',
                                 observer=observer, progress=False)
    return torch.cat([QuantExecutor(graph)(batch)[0] for batch in images[480:840].split(120)])


def test_kl_on_a_trained_digits_cnn_is_within_1_db_of_minmax(trained_digits_cnn):
    model, images = trained_digits_cnn
    with torch.no_grad():
        fp32 = model(images[480:840])
    kl, minmax = (int8_logits(model, images, observer) for observer in ('kl', 'minmax'))
    assert snr_db(fp32, minmax) > 25.0  # the model quantizes well
    assert snr_db(fp32, kl) > snr_db(fp32, minmax) - 1.0
    assert (kl.argmax(1) == fp32.argmax(1)).float().mean() > 0.98
