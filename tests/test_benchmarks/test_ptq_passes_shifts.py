"""benchmarks/ptq_passes.py's ``--calib-shifts``: the calibration batches and their rolls by
every one-pixel shift the training draws."""
import pytest
import torch
from benchmark_scripts import load_ptq_passes


@pytest.fixture
def ptq_passes(monkeypatch):
    return load_ptq_passes(monkeypatch)


def test_every_one_pixel_roll_follows_the_batches_once(ptq_passes):
    batches = [torch.randn(3, 1, 4, 4), torch.randn(3, 1, 4, 4)]
    result = ptq_passes.shifted(batches)
    assert len(result) == 18
    assert all(b.shape == (3, 1, 4, 4) for b in result)
    assert torch.equal(result[0], batches[0]) and torch.equal(result[1], batches[1])
    expected = [torch.roll(b, (dy, dx), dims=(2, 3)) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                if (dy, dx) != (0, 0) for b in batches]
    assert all(torch.equal(r, e) for r, e in zip(result[2:], expected))
    # the first batch's image appears under 9 distinct rolls, none twice
    assert len({tuple(b[0].flatten().tolist()) for b in result[0::2]}) == 9
