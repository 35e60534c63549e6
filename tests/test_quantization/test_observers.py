"""Observers against hand-computed values: minmax, percentile, kl, mse; rendering rules."""
import pytest
import torch

from razorlib.ir import QuantizationProperty as P
from razorlib.ir import QuantizationStates, RoundingPolicy, TensorQuantizationConfig
from razorlib.quantization import OBSERVERS, build_observer, linear_fake_quantize
from razorlib.quantization.observers import (MIN_SCALE, KLObserver, MinMaxObserver, MSEObserver,
                                             PercentileObserver, SymmetricHistogram,
                                             histogram_quantile)

SYMMETRIC = P.PER_TENSOR | P.LINEAR | P.SYMMETRICAL
ASYMMETRIC = P.PER_TENSOR | P.LINEAR | P.ASYMMETRICAL


def generator(seed=0):
    return torch.Generator().manual_seed(seed)


def per_channel_config(axis, **kwargs):
    return TensorQuantizationConfig(P.PER_CHANNEL | P.LINEAR | P.SYMMETRICAL, channel_axis=axis,
                                    **kwargs)


def rendered(observer, batches, config=None):
    config = config or TensorQuantizationConfig()
    for batch in batches:
        observer.observe(batch)
    observer.render(config)
    return config


def test_minmax_scale_is_max_abs_over_127_across_batches():
    batches = [torch.tensor([0.3, -1.7]), torch.tensor([[2.9, 0.0]]), torch.tensor([-3.1])]
    config = rendered(MinMaxObserver(), batches)
    assert config.scale.item() == pytest.approx(3.1 / 127)
    assert config.scale.shape == () and config.offset.item() == 0
    assert config.state is QuantizationStates.ACTIVATED


def test_symmetric_scale_follows_the_configs_quant_max():
    config = rendered(MinMaxObserver(), [torch.tensor([-2.0, 1.0])],
                      TensorQuantizationConfig(quant_min=-7, quant_max=7, num_of_bits=4))
    assert config.scale.item() == pytest.approx(2.0 / 7)


def test_asymmetric_maps_min_and_max_onto_the_integer_range():
    config = rendered(MinMaxObserver(), [torch.tensor([-1.0, 4.1])],
                      TensorQuantizationConfig(ASYMMETRIC, quant_min=0, quant_max=255))
    assert config.scale.item() == pytest.approx(5.1 / 255)
    assert config.offset.item() == 50  # -1.0 / 0.02 = -50 -> integer 0
    positive = rendered(MinMaxObserver(), [torch.tensor([1.0, 2.55])],
                        TensorQuantizationConfig(ASYMMETRIC, quant_min=0, quant_max=255))
    assert positive.scale.item() == pytest.approx(0.01) and positive.offset.item() == 0


@pytest.mark.parametrize('axis', [0, 1, -1])
def test_minmax_per_channel_reduces_everything_but_the_channel_axis(axis):
    tensor = torch.randn(3, 4, 5, generator=generator())
    config = rendered(MinMaxObserver(channel_axis=axis), [tensor],
                      per_channel_config(axis % 3))
    expected = tensor.abs().movedim(axis, 0).flatten(1).amax(1) / 127
    assert torch.allclose(config.scale, expected)
    assert config.offset.shape == expected.shape and not config.offset.any()


def test_build_observer_follows_the_config():
    observer = build_observer(per_channel_config(1, observer_algorithm='percentile'),
                              percentile=99.0)
    assert isinstance(observer, PercentileObserver)
    assert (observer.channel_axis, observer.percentile) == (1, 99.0)
    assert build_observer(TensorQuantizationConfig()).channel_axis is None
    with pytest.raises(KeyError, match="no observer 'fancy' in razorlib's registry; registered: "
                       'KLObserver, MSEObserver, MinMaxObserver, PercentileObserver, kl, '
                       'minmax, mse, percentile'):
        build_observer(TensorQuantizationConfig(observer_algorithm='fancy'))
    for cls in (KLObserver, MinMaxObserver, MSEObserver, PercentileObserver):
        assert OBSERVERS.get(cls.name) is OBSERVERS.get(cls.__name__) is cls
    by_class = build_observer(TensorQuantizationConfig(observer_algorithm='PercentileObserver'),
                              percentile=99.0)
    assert isinstance(by_class, PercentileObserver) and by_class.percentile == 99.0


def test_percentile_ignores_an_outlier():
    values = torch.cat([torch.linspace(-1.0, 1.0, 100001), torch.tensor([1000.0])])
    config = rendered(PercentileObserver(percentile=99.9), [values])
    # 99.9 % of |x| lies below 0.999; one bin is 1000 / 2048 wide.
    assert config.scale.item() * 127 == pytest.approx(0.999, abs=1000 / 2048)
    assert rendered(MinMaxObserver(), [values]).scale.item() * 127 == pytest.approx(1000.0)


def test_percentile_matches_torch_quantile_within_a_bin():
    values = torch.randn(50000, generator=generator(1))
    observer = PercentileObserver(percentile=99.0)
    config = rendered(observer, values.split(10000),
                      TensorQuantizationConfig(ASYMMETRIC, quant_min=0, quant_max=255))
    bin_width = observer.histogram.width.item()
    lo, hi = torch.quantile(values, torch.tensor([0.01, 0.99]))
    scale, offset = config.scale.item(), config.offset.item()
    assert -offset * scale == pytest.approx(lo.item(), abs=bin_width + scale)
    assert (255 - offset) * scale == pytest.approx(hi.item(), abs=bin_width + scale)


def test_percentile_per_channel():
    tensor = torch.stack([torch.linspace(-1, 1, 10001), torch.linspace(-5, 5, 10001)], dim=1)
    config = rendered(PercentileObserver(channel_axis=1, percentile=100.0), [tensor],
                      per_channel_config(1))
    assert torch.allclose(config.scale * 127, torch.tensor([1.0, 5.0]))


def test_kl_threshold_lies_between_the_gaussian_and_the_outliers():
    values = torch.cat([torch.randn(100000, generator=generator(2)), torch.full((20, ), 60.0)])
    threshold = rendered(KLObserver(), [values]).scale.item() * 127
    assert 3.0 < threshold < 20.0


def test_kl_threshold_of_a_relu_output_ignores_the_spike_of_zeros():
    gaussian = torch.randn(200000, generator=generator(3))
    full = rendered(KLObserver(), [gaussian]).scale.item() * 127
    relu = rendered(KLObserver(), [torch.relu(gaussian)]).scale.item() * 127
    assert relu == pytest.approx(full, rel=0.1)
    assert rendered(KLObserver(), [torch.zeros(10)]).scale.item() == MIN_SCALE


def test_kl_keeps_the_whole_range_of_a_uniform_distribution():
    values = torch.linspace(-1.0, 1.0, 200001)
    threshold = rendered(KLObserver(), [values]).scale.item() * 127
    assert threshold == pytest.approx(1.0, abs=0.02)


def quantization_mse(values, config):
    restored = linear_fake_quantize(values, config.scale, config.offset, config.quant_min,
                                    config.quant_max)
    return (values - restored).square().mean().item()


def laplace(count, seed=0):
    uniform = torch.rand(count, generator=generator(seed)) - 0.5
    return -uniform.sign() * torch.log1p(-2 * uniform.abs())


@pytest.mark.parametrize('policy', [SYMMETRIC, ASYMMETRIC])
@pytest.mark.parametrize('quant_min,quant_max,ratio', [(-128, 127, 0.95), (-8, 7, 0.5)])
def test_mse_beats_minmax_on_heavy_tails(policy, quant_min, quant_max, ratio):
    values = laplace(50000)
    configs = [rendered(observer, [values], TensorQuantizationConfig(
        policy, num_of_bits=8 if quant_max > 7 else 4, quant_min=quant_min, quant_max=quant_max))
        for observer in (MSEObserver(), MinMaxObserver())]
    mse, minmax = [quantization_mse(values, config) for config in configs]
    assert mse < ratio * minmax


def test_mse_keeps_the_range_of_uniform_data():
    values = torch.linspace(-1.0, 1.0, 20001)
    config = rendered(MSEObserver(), [values])
    assert config.scale.item() * 127 == pytest.approx(1.0, abs=0.02)


def test_mse_per_channel_picks_per_channel_ranges():
    tensor = torch.stack([torch.linspace(-1, 1, 2001), torch.linspace(-8, 8, 2001)])
    config = rendered(MSEObserver(channel_axis=0), [tensor], per_channel_config(0))
    assert torch.allclose(config.scale * 127, torch.tensor([1.0, 8.0]), rtol=0.02)


def test_power_of_two_scales_round_up():
    config = rendered(MinMaxObserver(), [torch.tensor([3.0])],
                      TensorQuantizationConfig(SYMMETRIC | P.POWER_OF_2))
    assert config.scale.item() == 2.0**-5  # 3 / 127 = 0.0236 -> 1/32


def test_a_constant_zero_tensor_gets_the_smallest_scale():
    assert rendered(MinMaxObserver(), [torch.zeros(4)]).scale.item() == pytest.approx(MIN_SCALE)


def test_render_refuses_what_it_cannot_render():
    with pytest.raises(RuntimeError, match='observe at least one tensor'):
        MinMaxObserver().render(TensorQuantizationConfig())
    observer = MinMaxObserver()
    observer.observe(torch.ones(2, 3))
    with pytest.raises(ValueError, match='this one is FP32'):
        observer.render(TensorQuantizationConfig(state=QuantizationStates.FP32))
    with pytest.raises(ValueError, match='the config wants 0'):
        observer.render(per_channel_config(0))
    per_channel = MinMaxObserver(channel_axis=1)
    per_channel.observe(torch.ones(2, 3))
    with pytest.raises(ValueError, match='the config wants None'):
        per_channel.render(TensorQuantizationConfig())


def test_observe_refuses_inconsistent_batches():
    observer = MinMaxObserver(channel_axis=1)
    observer.observe(torch.ones(2, 3))
    with pytest.raises(ValueError, match='got 4 channels after batches of 3'):
        observer.observe(torch.ones(2, 4))
    with pytest.raises(ValueError, match='rank 3 after tensors of rank 2'):
        observer.observe(torch.ones(2, 3, 1))
    with pytest.raises(ValueError, match='channel_axis 2 is out of range'):
        MinMaxObserver(channel_axis=2).observe(torch.ones(2, 3))
    with pytest.raises(ValueError, match='empty tensor'):
        MinMaxObserver().observe(torch.ones(0))
    with pytest.raises(ValueError, match='inf or nan'):
        MinMaxObserver().observe(torch.tensor([1.0, float('nan')]))


@pytest.mark.parametrize('kwargs', [dict(percentile=0.0), dict(percentile=100.5)])
def test_percentile_is_validated(kwargs):
    with pytest.raises(ValueError, match='percentile must lie in'):
        PercentileObserver(**kwargs)


@pytest.mark.parametrize('percentile, suggestion', [
    (0.9999, '99.99'), (0.999, '99.9'), (0.99999999, '99.999999'), (0.5, '50'), (1, '100')])
def test_a_percentile_given_as_a_fraction_is_refused_with_its_percentage(
        percentile, suggestion):
    with pytest.raises(ValueError) as error:
        PercentileObserver(percentile=percentile)
    assert str(error.value) == (f'percentile is in percent, in [50, 100]: got {percentile}, '
                                f'a fraction; did you mean {suggestion}?')


def test_a_fraction_is_refused_before_it_calibrates_a_model():
    # PPQ's percentile=0.9999 used to calibrate ranges of nearly nothing: 0.01 dB SNR
    from razorlib.quantization import quantize_torch_model
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)).eval()
    data = [torch.randn(2, 3, 8, 8)]
    with pytest.raises(ValueError, match=r'got 0\.9999, a fraction; did you mean 99\.99\?'):
        quantize_torch_model(net, data, data[0], progress=False,
                             observer=dict(type='PercentileObserver', percentile=0.9999))


def test_percentiles_below_50_and_outside_0_100_are_refused_at_and_above_50_taken():
    with pytest.raises(ValueError, match=r'^percentile is in percent, in \[50, 100\]: got 10; '
                       'a range holding less than half of the values clips most of them'):
        PercentileObserver(percentile=10)
    with pytest.raises(ValueError, match=r'^percentile must lie in \(0, 100\], got 120$'):
        PercentileObserver(percentile=120)
    with pytest.raises(ValueError, match=r'^percentile must lie in \(0, 100\], got -1$'):
        PercentileObserver(percentile=-1)
    assert [PercentileObserver(percentile=p).percentile for p in (50, 99.99, 100)] == [
        50.0, 99.99, 100.0]


@pytest.mark.parametrize('value', ['high', None, True, [99.9]])
def test_a_percentile_that_is_no_number_is_refused_by_name(value):
    with pytest.raises(TypeError) as error:
        PercentileObserver(percentile=value)
    assert str(error.value) == (f'percentile must be a number (a percentage in [50, 100]), '
                                f'got {value!r} ({type(value).__name__})')
    with pytest.raises(ValueError, match='^percentile must be a number .*got nan$'):
        PercentileObserver(percentile=float('nan'))


@pytest.mark.parametrize('cls, option, value', [
    (PercentileObserver, 'bins', 'many'), (PercentileObserver, 'bins', 4096.0),
    (KLObserver, 'bins', None), (MSEObserver, 'bins', True), (MSEObserver, 'grid', 2.5),
    (MSEObserver, 'grid', '100')])
def test_integer_options_that_are_no_integers_are_refused_by_name(cls, option, value):
    wanted = {'bins': 'a number of histogram bins', 'grid': 'a number of candidate ranges'}
    with pytest.raises(TypeError) as error:
        cls(**{option: value})
    assert str(error.value) == (f'{option} must be an integer ({wanted[option]}), got '
                                f'{value!r} ({type(value).__name__})')
    with pytest.raises(ValueError, match='an even number of bins, got 7'):
        cls(bins=7)


def test_histogram_growth_is_exact():
    # Odd multiples of 1/64 never sit on a bin edge at limit 1 or 3 (edges: multiples of
    # 1/32 and 3/32), so counting batch by batch while the limit grows from 1 to 3 must
    # give the counts of one pass at limit 3.
    first = torch.cat([torch.randint(-32, 32, (500, ), generator=generator(3)) * 2 + 1,
                       torch.tensor([64, -64])]) / 64
    second = torch.cat([torch.randint(-96, 96, (500, ), generator=generator(4)) * 2 + 1,
                        torch.tensor([192])]) / 64
    growing = SymmetricHistogram(bins=64)
    growing.add(first[None])
    growing.add(second[None])
    assert growing.limit.item() == 3.0
    index = ((torch.cat([first, second]) + 3.0) / (6.0 / 64)).floor().long().clamp(0, 63)
    assert torch.equal(growing.counts[0], torch.bincount(index, minlength=64))


def test_histogram_quantile_interpolates_inside_the_bin():
    counts = torch.tensor([[2, 0, 2]])
    quantile = histogram_quantile(counts, torch.tensor([0.0]), torch.tensor([1.0]), 0.25)
    assert quantile.item() == pytest.approx(0.5)
    assert histogram_quantile(counts, torch.tensor([0.0]), torch.tensor([1.0]), 1.0).item() == 3


@pytest.mark.parametrize('rounding,expected', [
    (RoundingPolicy.ROUND_HALF_EVEN, [-2.0, -2.0, 2.0, 2.0]),
    (RoundingPolicy.ROUND_HALF_AWAY_FROM_ZERO, [-3.0, -2.0, 2.0, 3.0]),
    (RoundingPolicy.ROUND_HALF_TOWARDS_ZERO, [-2.0, -1.0, 1.0, 2.0]),
    (RoundingPolicy.ROUND_HALF_UP, [-2.0, -1.0, 2.0, 3.0]),
    (RoundingPolicy.ROUND_HALF_DOWN, [-3.0, -2.0, 1.0, 2.0]),
    (RoundingPolicy.ROUND_UP, [-2.0, -1.0, 2.0, 3.0]),
    (RoundingPolicy.ROUND_DOWN, [-3.0, -2.0, 1.0, 2.0]),
])
def test_rounding_policies(rounding, expected):
    values = torch.tensor([-2.5, -1.5, 1.5, 2.5])
    assert linear_fake_quantize(values, 1.0, 0, -128, 127, rounding).tolist() == expected


def test_a_histogram_grown_from_an_all_zero_batch_keeps_its_counts():
    # the limit grows from its floor by a factor near 1e16: its counts are re-binned
    # without overflowing, so the zeros stay at zero
    histogram = SymmetricHistogram(4096)
    histogram.add(torch.zeros(1, 1000))
    histogram.add(torch.tensor([[1e4]]))
    assert histogram.counts[0].nonzero().flatten().tolist() == [2048, 4095]
    assert histogram.counts[0, 2048] == 1000


@pytest.mark.parametrize('name', ['percentile', 'kl', 'mse'])
def test_the_order_of_calibration_batches_does_not_move_a_histograms_range(name):
    torch.manual_seed(0)
    x = torch.cat([torch.randn(20000) * 10, torch.tensor([1e4])])
    scales = []
    for batches in ([torch.zeros(1000), x], [torch.cat([torch.zeros(1000), x])],
                    [x, torch.zeros(1000)]):
        config = TensorQuantizationConfig(observer_algorithm=name)
        observer = build_observer(config)
        for batch in batches:
            observer.observe(batch)
        observer.render(config)
        scales.append(float(config.scale))
    assert scales[0] == pytest.approx(scales[1]) and scales[2] == pytest.approx(scales[1])
