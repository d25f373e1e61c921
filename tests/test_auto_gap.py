"""auto's gap to the MILP bound on small graphs (solvers/auto.py, "Gap to the MILP bound")."""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import remat
from remat import schedule
from remat.simulate import simulate_training
from remat.cli import main
from remat.solvers import auto, milp
from strategies import dags, residual

MILP_KEYS = {"milp_status", "milp_bound", "gap_to_milp_bound", "gap_to_milp_bound_of_forward"}


def vanilla_peak(g: remat.Graph) -> float:
    return simulate_training(g, schedule.vanilla(g)).peak


def test_on_a_tiny_chain_the_gap_is_to_the_milp_optimum():
    g = remat.Graph.chain(8)
    for frac in (0.6, 0.8):
        budget = frac * vanilla_peak(g)
        plan = remat.solve(g, budget, solver="auto")
        s = plan.stats
        assert plan.feasible and s["milp_status"] == "optimal"
        best = milp.solve(g, budget, warm_start=False)  # milp alone, not started from auto's plan
        assert best.status == "optimal" and s["milp_bound"] == pytest.approx(best.recompute_cost)
        over = plan.recompute_cost - best.recompute_cost
        assert over >= -1e-9 and s["milp_recompute_cost"] == pytest.approx(best.recompute_cost)
        assert s["gap_to_milp_bound"] == pytest.approx(over / best.recompute_cost if best.recompute_cost else 0.0)
        assert s["gap_to_milp_bound_of_forward"] == pytest.approx(over / g.total_cost())


def test_the_bound_is_below_auto_on_a_residual_graph():
    g = residual(4)
    budget = 0.5 * vanilla_peak(g)
    plan = remat.solve(g, budget, solver="auto")
    s = plan.stats
    assert plan.feasible and MILP_KEYS <= set(s)
    assert s["milp_bound"] <= plan.recompute_cost + 1e-9
    assert s["gap_to_milp_bound_of_forward"] == pytest.approx((plan.recompute_cost - s["milp_bound"]) / g.total_cost())
    assert s.get("chosen") != "milp"  # reported, never swapped in


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=dags(min_nodes=2, max_nodes=7), frac=st.floats(0.0, 1.0))
def test_the_bound_is_below_auto_on_random_dags(g, frac):
    low, top = remat.min_budget(g, solver="auto"), vanilla_peak(g)
    plan = remat.solve(g, low + frac * max(top - low, 0.0), solver="auto")
    if plan.feasible and not plan.stats.get("floor"):  # auto's least-peak plan (judge.floor) is not auto.solve's
        assert MILP_KEYS <= set(plan.stats)
        assert plan.stats["milp_bound"] <= plan.recompute_cost + 1e-6 * max(g.total_cost(), 1.0)


def test_no_milp_above_the_node_limit_or_when_turned_off():
    big = remat.Graph.chain(auto.MILP_GAP_NODES + 1)
    plan = remat.solve(big, 0.6 * vanilla_peak(big), solver="auto")
    assert plan.feasible and not MILP_KEYS & set(plan.stats)
    assert "milp_gap" not in plan.stats.get("cut_short", {})
    small = remat.Graph.chain(8)
    off = remat.solve(small, 0.6 * vanilla_peak(small), solver="auto", milp_gap=False)
    assert off.feasible and not MILP_KEYS & set(off.stats)


def test_milp_warm_started_by_auto_does_not_run_the_gap_check(monkeypatch):
    calls = []
    monkeypatch.setattr(auto, "_milp_gap", lambda *a: calls.append(a) or ({}, None))
    g = remat.Graph.chain(8)
    plan = milp.solve(g, 0.6 * vanilla_peak(g))
    assert plan.status == "optimal" and plan.stats["phases"][0]["program"] == "auto"
    assert not calls


def test_optimize_plans_without_the_gap_and_shares_the_floor_with_solve(monkeypatch):
    # optimize reports no gap, and its searches plan a graph at many planning budgets: no MILP there
    from remat import judge
    from remat.optimize import plan_within

    calls = []
    monkeypatch.setattr(auto, "_milp_gap", lambda *a: calls.append(a) or ({}, None))
    g = remat.Graph.chain(8)
    budget = 0.6 * vanilla_peak(g)
    choice = plan_within(g, budget, "auto", "time")
    assert not calls and not MILP_KEYS & set(choice.plan.stats)
    assert choice.recompute_cost == pytest.approx(remat.solve(g, budget, solver="auto").recompute_cost)
    assert len(calls) == 1  # remat.solve still asks for it, once, for the plan it answers with
    # a floor sought with the gap turned off is the one remat.min_budget finds: one search, one answer
    other = remat.Graph.chain(9)
    low = judge.floor(other, "auto", milp_gap=False)
    assert judge.floor(other, "auto") is low


def test_no_time_left_is_said_in_cut_short(monkeypatch):
    monkeypatch.setattr(auto, "MILP_GAP_MIN_SECONDS", 1e9)  # more than is ever left
    g = remat.Graph.chain(8)
    plan = auto.solve(g, 0.8 * vanilla_peak(g), candidates=("chen-sqrt", "none"))
    assert plan.feasible and not MILP_KEYS & set(plan.stats)
    assert "not run" in plan.stats["cut_short"]["milp_gap"]


def test_remat_solve_prints_the_gap(tmp_path, capsys):
    path = tmp_path / "chain.json"
    remat.Graph.chain(8).save(path)
    assert main(["solve", str(path), "--budget", "60%", "--solver", "auto"]) == 0
    assert "gap to MILP bound" in capsys.readouterr().out
    assert main(["solve", str(path), "--budget", "80%", "--solver", "dp-approx"]) in (0, 1)
    assert "gap to MILP bound" not in capsys.readouterr().out
