"""fit: the search finds the boundary in few probes, its answers hold for the traced graphs and
for a real step, device memory is budgeted as documented, and ``remat fit`` runs."""

from __future__ import annotations

import json
import math

import pytest
import torch

import models
import remat
from remat.errors import BudgetError, InputError
from remat.fit import DEVICES, Fit, builder, device_bytes, fit, largest, optimizer_states
from remat.measure import measure

MiB = 2**20


@pytest.mark.parametrize("name, f, cap, most", [
    ("affine", lambda n: 3 * n + 10 - 1000, 2**20, 6),
    ("quadratic", lambda n: 0.01 * n * n + 5 * n + 7 - 10**6, 2**20, 8),
    ("step", lambda n: (n > 777) - 0.5, 2**20, 30),
    ("concave", lambda n: math.sqrt(n) - 300.3, 2**20, 16),
    ("none fit", lambda n: 1.0, 100, 1),
    ("all fit", lambda n: -1.0, 1000, 12),
    ("infinite", lambda n: math.inf if n > 50 else -1.0, 2**20, 16),
])
def test_largest_finds_the_boundary_in_few_probes(name, f, cap, most):
    seen: dict[int, float] = {}
    n = largest(f, cap=cap, points=seen)
    truth = max((k for k in range(1, min(cap, 200_000) + 1) if f(k) <= 0), default=0)
    assert n == truth
    assert len(seen) <= most
    if 0 < n < cap:
        assert seen[n] <= 0 < seen[n + 1]  # both sides of the boundary were traced


def mlp(n):
    return models.build_mlp(batch=n)


def small(batch):
    """Three linear layers: cheap to trace, for the tests about the budget rather than the search."""
    return (torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 4)), (torch.randn(batch, 32),))


@pytest.fixture(scope="module")
def result() -> Fit:
    return fit(mlp, "2MiB", solver="selective")


def test_fit_answers_hold_on_the_traced_graphs(result):
    by_n = {p.n: p for p in result.probes}
    assert 0 < result.vanilla < result.remat < result.cap
    assert by_n[result.vanilla].vanilla_peak <= 2 * MiB < by_n[result.vanilla + 1].vanilla_peak
    assert by_n[result.remat].remat_floor <= 2 * MiB < by_n[result.remat + 1].remat_floor
    assert result.remat_peak <= 2 * MiB and result.vanilla_peak <= 2 * MiB
    assert result.time_ratio > 1.0 and result.chosen
    assert len(result.probes) <= 12  # peaks are affine in the batch: a handful of traces
    text = str(result)
    assert "the largest batch that fits" in text and "vanilla" in text and "remat" in text and f"{result.remat}" in text
    assert json.loads(json.dumps(result.to_json()))["remat"] == result.remat


def test_fit_answers_hold_for_a_real_step(result):
    """The vanilla batch fits measured on CPU; remat.optimize meets the budget at the remat batch."""
    model, inputs = mlp(result.vanilla)
    assert measure(model, inputs).peak <= 2 * MiB * 1.01
    model, inputs = mlp(result.remat)
    module = remat.optimize(model, inputs, 2 * MiB, solver="selective")
    assert module.report.measured_peak <= 2 * MiB * 1.01


def test_model_fn_runs_on_the_meta_device():
    devices = []

    def make(n):
        devices.append(torch.empty(1).device.type)
        return torch.nn.Linear(8, 8), (torch.randn(n, 8, device="cpu"),)  # moved to meta by fit

    out = fit(make, "64KiB", cap=4096)
    assert set(devices) == {"meta"} and out.vanilla > 0


def test_device_memory_leaves_room_for_the_state():
    out = fit(small, device_memory="1MiB", reserve=0, optimizer="adam", solver="selective")
    s = out.state
    params = (32 * 32 + 32) * 4 * 2 + (32 * 4 + 4) * 4
    assert s["parameters"] == params and s["gradients"] == params and s["optimizer"] == 2 * params
    assert s["buffers"] == 0 and s["inputs"] == out.remat * 32 * 4
    assert out.remat_budget == pytest.approx(1 * MiB - sum(s.values()))
    assert out.device == "1MiB" and out.device_memory == 1 * MiB and 0 < out.vanilla <= out.remat
    smaller = fit(small, "256KiB", device_memory="1MiB", reserve=0, solver="selective")  # the smaller applies
    assert smaller.remat < out.remat and smaller.remat_budget == 256 * 2**10
    assert "parameters" in str(out) and "reserve" in str(out)


def test_device_names():
    assert device_bytes("H100") == ("H100", 81559 * MiB)
    assert device_bytes("a100 80gb") == ("A100-80GB", DEVICES["A100-80GB"])
    assert device_bytes("80GiB") == ("80GiB", 80 * 2**30)
    with pytest.raises(InputError, match="neither a known device .* nor a size"):
        device_bytes("TPUv9")
    assert optimizer_states("adam") == 2 and optimizer_states("sgd") == 0 and optimizer_states(3) == 3


@pytest.mark.parametrize("kwargs, error, match", [
    ({"budget": "40%"}, BudgetError, "relative to the vanilla peak"),
    ({"budget": 0.5}, BudgetError, "relative to the vanilla peak"),
    ({}, BudgetError, "needs a budget"),
    ({"budget": "1MiB", "optimizer": "lion?"}, InputError, "optimizer must be"),
    ({"budget": "1MiB", "solver": "magic"}, ValueError, "magic"),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        fit(mlp, **kwargs)


def test_model_fn_must_return_a_model_and_inputs():
    with pytest.raises(InputError, match=r"must return \(model, example_inputs\)"):
        fit(lambda n: torch.nn.Linear(2, 2), "1MiB")
    with pytest.raises(InputError, match="unknown model"):
        builder("no-such-net")


def test_hf_config_sequence_length_is_capped_at_its_positions(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    cfg.save_pretrained(tmp_path)
    make = builder(f"hf:{tmp_path}", "seq_len", {"batch": 2})
    assert make.max_n == 64
    out = fit(make, "1GiB", vary="seq_len", name="tiny-gpt2", solver="chen-sqrt", start=1000)
    assert out.vanilla == out.remat == 64 and out.capped
    assert "seq_len" in str(out) and "cap" in str(out)


def test_remat_fit_command(capsys):
    from remat.cli import main

    assert main(["fit", "test_fit:small", "--budget", "256KiB", "--solver", "selective", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert 0 < record["vanilla"] < record["remat"] and record["time_ratio"] > 1 and "probes" not in record
    assert record["name"] == "test_fit:small" and record["budget"] == 2**18
    assert main(["fit", "models:build_mlp", "--budget", "40%"]) == 2
    assert "relative to the vanilla peak" in capsys.readouterr().err
