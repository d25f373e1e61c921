"""measure: exact byte counts on hand-sized steps, the two CPU methods against each other."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

import remat
from remat.errors import InputError
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
    assert model[0].weight.grad is None  # given back as found (``given_back``)


@pytest.mark.parametrize("method", ["tracker", "profiler"])
def test_gradients_allocated_before_the_step_are_added_into_and_their_temporaries_count(method):
    """``gradients="allocated"`` (measure's protocol on CUDA): the 4 MB weight's ``.grad`` exists
    before the step and is added into, never replaced; the gradient made for it counts until then."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1000, 1000), nn.Tanh())
    x = torch.randn(1, 1000)
    m = measure(model, (x,), method=method, gradients="allocated")
    assert 4_000_000 <= m.peak < 4_000_000 + 20_000
    assert model[0].weight.grad is None  # allocated for the step only
    grad = model[0].weight.grad = torch.full_like(model[0].weight, 3.0)
    added: list[torch.Tensor] = []
    model[0].weight.register_post_accumulate_grad_hook(lambda p: added.append(p.grad))
    assert measure(model, (x,), method=method, gradients="allocated").peak == m.peak
    assert added and all(g is grad for g in added)  # added into, never replaced
    assert model[0].weight.grad is grad and torch.equal(grad, torch.full_like(grad, 3.0))  # and given back
    with pytest.raises(InputError, match="gradients"):
        measure(model, (x,), method=method, gradients="zeros")


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


class _SetsOnFirstCall(nn.Module):
    """Sets an attribute in its first call (as an HF classifier sets ``config.problem_type``), so
    dynamo's guard on it fails in the second call and that call compiles again."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.kind = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        if self.kind is None:
            self.kind = "set"
            return out.relu()
        return out.tanh()


@pytest.mark.parametrize("warmup", [1, 2])
def test_the_measured_step_compiles_nothing(monkeypatch, warmup):
    """Warm-up goes on while a step compiles: a compile inside the measured step counts what
    compiling allocates and keeps. The measured step of a model that compiles again in its second
    call compiles nothing."""
    from torch._dynamo.utils import counters

    m = sys.modules["remat.measure"]  # (``remat.measure`` is also the function)

    def compiles() -> int:
        return sum(counters["stats"].values()) + sum(counters["aot_autograd"].values())

    seen = []
    real = m._profiler_peak

    def tracked(step, params):
        before = compiles()
        peak = real(step, params)
        seen.append(compiles() - before)
        return peak

    monkeypatch.setattr(m, "_profiler_peak", tracked)
    torch._dynamo.reset()
    model = torch.compile(_SetsOnFirstCall(), backend="aot_eager")
    measure(model, torch.randn(4, 8), method="profiler", warmup=warmup)
    assert seen == [0]
    torch._dynamo.reset()


def test_compiled_code_is_measured_by_the_profiler_and_stays_compiled():
    """A torch.compile'd model's buffers are made outside the dispatcher, where the tracker cannot
    see them: "auto" measures it by the profiler, and the tracker is refused by name. A step
    function that calls compiled code under the tracker runs it compiled, and it stays compiled
    after (dynamo otherwise skips a frame seen under a dispatch mode for good)."""
    runs = []

    def backend(gm, example_inputs):
        def run(*args):
            runs.append(1)
            return gm(*args)
        return run

    torch._dynamo.reset()
    model = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.Tanh()), backend=backend)
    x = torch.randn(4, 8)
    assert measure(model, x).method == "profiler"
    with pytest.raises(remat.InputError, match="method='profiler'"):
        measure(model, x, method="tracker")

    def step(x):
        model(x).sum().backward()

    counted = len(runs)
    measure(step, (x,), method="tracker", warmup=0)
    assert len(runs) == counted + 1
    model(x)
    assert len(runs) == counted + 2
    torch._dynamo.reset()


@pytest.mark.parametrize("gradients", ["none", "allocated"])
def test_measure_gives_the_model_back_as_it_found_it(gradients):
    """A user's gradients (the same tensors, their values), batch-norm statistics and RNG state are
    what they were before ``measure``: its steps would otherwise leave their gradients for the user's
    next step to add into, move the statistics, and change the next dropout masks."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 1))
    x = torch.randn(4, 8)
    grads = {n: torch.full_like(p, 2.0) for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        p.grad = grads[n]
    stats = {n: b.clone() for n, b in model.named_buffers()}
    rng = torch.get_rng_state()
    measure(model, (x,), method="tracker", gradients=gradients, repeats=2)
    for n, p in model.named_parameters():
        assert p.grad is grads[n] and torch.equal(p.grad, torch.full_like(p, 2.0)), n
    for n, b in model.named_buffers():
        assert torch.equal(b, stats[n]), n
    assert torch.equal(torch.get_rng_state(), rng)
