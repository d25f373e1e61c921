"""measure: exact byte counts on hand-sized steps, the two CPU methods against each other."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import remat
from remat.measure import compare_times, measure


def step_with_known_peak():
    a = torch.ones(1000)          # 4000 bytes
    b = a * 2                     # 8000 live
    del a
    c = b + 1                     # 8000 live again (a was freed)
    d = torch.cat([b, c])         # 16000 live: the peak
    return d.sum()


@pytest.mark.parametrize("method", ["tracker", "profiler"])
def test_exact_peak_of_a_hand_sized_step(method):
    m = measure(step_with_known_peak, (), method=method, warmup=0)
    assert m.method == method
    assert m.peak == 4000 + 4000 + 8000 + 4  # d and, while d lives, the 4-byte sum


@pytest.mark.parametrize("method", ["tracker", "profiler"])
def test_parameter_gradients_are_not_activation_memory(method):
    """A 4 MB weight whose activations are 8 KB: gradients and parameters are excluded."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1000, 1000), nn.Tanh())
    x = torch.randn(1, 1000)
    m = measure(model, (x,), method=method)
    assert m.peak < 20_000
    assert model[0].weight.grad is not None


class OwnAutocast(nn.Module):
    """The user's step: the autocast block holds the forward alone."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", torch.bfloat16):
            return self.inner(x)


@pytest.mark.parametrize("method", ["tracker", "profiler"])
def test_a_step_inside_an_enclosing_autocast_counts_its_own_weight_casts(method):
    """Measured inside ``with torch.autocast``, the warm-up step's bf16 weight cast used to stay in
    autocast's cache, so it sat in the baseline and the peak missed it (2 MB here)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1000, 1000), nn.Tanh())
    x = torch.randn(4, 1000)
    with torch.autocast("cpu", torch.bfloat16):
        enclosed = measure(model, (x,), method=method)
    own = measure(OwnAutocast(model), (x,), method=method)
    assert enclosed.peak == own.peak
    assert own.peak >= 1000 * 1000 * 2  # the weight's bf16 cast is live while the forward multiplies


def test_tracker_and_profiler_agree_on_a_deep_mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [nn.Linear(64, 64), nn.Tanh()]
    model = nn.Sequential(*layers)
    x = torch.randn(32, 64)
    tracker, profiler = measure(model, (x,), method="tracker"), measure(model, (x,), method="profiler")
    assert tracker.peak == profiler.peak
    # six saved tanh outputs of 32x64 floats, plus the gradient buffers of the backward
    assert tracker.peak >= 6 * 32 * 64 * 4


def test_keyword_inputs_and_unknown_method():
    model = nn.Linear(3, 2)
    assert measure(model, {"input": torch.randn(4, 3)}).peak > 0
    with pytest.raises(ValueError, match="tracker"):
        measure(model, (torch.randn(4, 3),), method="rss")


def test_compare_times_reports_ratio_and_medians():
    out = compare_times(lambda: None, lambda: None, repeats=5)
    assert set(out) == {"a_seconds", "b_seconds", "ratio", "repeats"} and out["repeats"] == 5


def test_measure_is_exported():
    assert remat.measure is measure
