"""optimize: budget parsing, bad input, the measured-peak promise, and the ``remat run`` command."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

import remat
import models
from remat.measure import default_loss
from remat.optimize import BudgetError, parse_budget


@pytest.mark.parametrize("text, expected", [
    (1000, 1000.0), ("2GiB", 2 * 2**30), ("512 MB", 512e6), ("300KiB", 300 * 1024), ("1.5kb", 1500.0),
    ("40%", 400.0), ("100%", 1000.0), ("123", 123.0)])
def test_parse_budget(text, expected):
    assert parse_budget(text, vanilla_peak=1000) == expected


@pytest.mark.parametrize("bad", ["two gigs", "-5", "5 parsecs", None, True])
def test_parse_budget_rejects_nonsense(bad):
    with pytest.raises(ValueError, match="budget"):
        parse_budget(bad, vanilla_peak=1000)


def test_unknown_solver_lists_the_known_ones():
    model, inputs = models.build_mlp()
    with pytest.raises(ValueError, match="known solvers: .*chen-sqrt"):
        remat.optimize(model, inputs, "50%", solver="magic")


def test_a_budget_below_the_minimum_gives_the_minimum():
    model, inputs = models.build_mlp()
    with pytest.raises(BudgetError, match=r"below the minimum: the smallest budget chen-sqrt can meet .* bytes"):
        remat.optimize(model, inputs, 1000, solver="chen-sqrt")


@pytest.mark.parametrize("budget", ["100%", "60%"])
def test_measured_peak_is_within_the_budget(budget):
    """Tolerance 1%: on the CPU the allocator-level peak (profiler), which the walk predicts; the slack
    covers RNG states and scalars."""
    model, inputs = models.build_gpt2()
    ref = copy.deepcopy(model)
    module = remat.optimize(model, inputs, budget, solver="twremat")
    rep = module.report
    assert rep["measured_peak"] <= rep["budget"] * 1.01
    assert rep["method"] == "profiler"  # the CPU: allocator level, as the walk predicts
    # verification ran a step but left the model as it was: one step now matches the reference
    torch.manual_seed(0)
    default_loss(ref(**inputs)).backward()
    torch.manual_seed(0)
    default_loss(module(**inputs)).backward()
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(ref.parameters(), model.parameters()))


def test_auto_takes_the_cheapest_plan_that_fits():
    model, inputs = models.build_mlp()
    module = remat.optimize(model, inputs, "60%")
    fitting = [t for t in module.report["tried"] if t.get("fits")]
    assert fitting and module.report["recompute_cost"] == min(t["recompute_cost"] for t in fitting)


def test_remat_run_prints_one_json_object(capsys):
    from remat.cli import main

    assert main(["run", "models:build_mlp", "--budget", "50%", "--solver", "twremat", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gradients_identical"] is True
    assert out["optimized_measured_peak"] < out["vanilla_measured_peak"]
    assert {"predicted_peak", "time_ratio", "method"} <= set(out)
    assert out["cost"] == "roofline"  # cost="auto", the default, on the CPU
    # measured on the scale the budget was resolved on (the CPU's allocator level): "50%" of that vanilla
    assert out["method"] == "profiler"
    assert out["budget"] == pytest.approx(0.5 * out["vanilla_measured_peak"], rel=1e-6)
    assert out["optimized_measured_peak"] <= out["budget"] * 1.01


def test_verify_replans_then_says_by_how_much_the_budget_is_missed():
    """A tolerance of -50% cannot be met: the loop tightens the plan, then reports the excess."""
    model, inputs = models.build_mlp()
    with pytest.raises(BudgetError, match=r"cannot be met on the real step: .* measured .* over"):
        remat.optimize(model, inputs, "100%", solver="twremat", tolerance=-0.5, rounds=2)


def test_a_budget_that_needs_no_recomputation_runs_the_model_itself_when_the_code_saves_nothing(tmp_path):
    """A ResNet-style CNN at 100%: nothing to recompute, and the generated code would peak as eager's
    step does, so the step is eager PyTorch's own (no overhead). At 60% it runs the generated code.
    A plan cache keeps the choice."""
    model, inputs = models.build_cnn()
    ref = copy.deepcopy(model)
    module = remat.optimize(model, inputs, "100%", plan_cache=tmp_path)
    assert module.report.executor == "eager" and module.report.recompute_cost == 0
    assert module.report.measured_peak == module.report.vanilla_measured_peak
    assert any("runs eager PyTorch" in n for n in module.report.notes)
    calls = []
    model.register_forward_hook(lambda *a: calls.append(1))
    default_loss(module(*inputs)).backward()
    default_loss(ref(*inputs)).backward()
    assert calls == [1]  # the model itself ran
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
    again = remat.optimize(copy.deepcopy(ref), inputs, "100%", plan_cache=tmp_path)
    assert again.report.executor == "eager" and again.step.eager
    assert remat.optimize(copy.deepcopy(ref), inputs, "60%").report.executor == "compiled"


def test_optimize_runs_eager_where_only_eagers_step_fits(monkeypatch):
    """A budget eager's step meets and no plan's generated code does runs eager PyTorch, and says
    why. Made so here: the generated backward made to return every gradient when it ends (as it
    does where a hook needs autograd's accumulation), with ``.grad`` allocated: a wide MLP at batch
    2 then holds its 3 MB of gradients together, eager one at a time. Below eager's peak every plan
    holds them: refused, naming at least them; an unknown ``gradients=`` is refused up front."""
    from remat.compiled import accumulate

    monkeypatch.setattr(accumulate, "in_place", lambda *args: [])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 512))
    x = torch.randn(2, 512)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    whole = remat.optimize(model, (x,), "100%", gradients="allocated")
    assert whole.report.executor == "eager" and any("no plan's generated code" in n for n in whole.report.notes)
    assert remat.measure(whole, (x,), gradients="allocated").peak <= 1.01 * whole.report.budget
    with pytest.raises(remat.InfeasibleError) as refused:
        remat.optimize(model, (x,), "50%", gradients="allocated")
    assert refused.value.needed >= params
    with pytest.raises(remat.InputError, match="gradients"):
        remat.optimize(model, (x,), "100%", gradients="zeros")


def test_a_refusal_retried_by_its_caller_seeks_no_floor(monkeypatch):
    """``plan_within(named=False)`` (the partitioner's re-plans, which try otherwise: a shortlist of auto's
    candidates, then all of them) refuses without seeking the smallest budget the solver meets over all its
    candidates; by default the refusal names it."""
    import importlib

    from strategies import residual

    optimize_module = importlib.import_module("remat.optimize")
    g = residual(6)
    floor = remat.min_budget(g, "selective")
    sought = []
    real = optimize_module.smallest_budget
    monkeypatch.setattr(optimize_module, "smallest_budget", lambda *a, **k: sought.append(a) or real(*a, **k))
    with pytest.raises(remat.InfeasibleError, match="not sought") as quiet:
        optimize_module.plan_within(g, 0.5 * floor, "selective", "time", named=False)
    assert not sought and quiet.value.needed is None
    with pytest.raises(remat.InfeasibleError, match="smallest budget selective can meet") as told:
        optimize_module.plan_within(g, 0.5 * floor, "selective", "time")
    assert sought and told.value.needed == pytest.approx(floor)
