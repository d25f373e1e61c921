"""The shared checker: every registered training solver on random DAGs (STYLE.md §6).

For each solver and graph (DESIGN.md, "One truth"): the plan's peak and recompute cost are the
simulation of the schedule it carries (the one the runtime executes), feasible means that peak
is within the budget, stage plans are increasing lower-set sequences ending in V whose own
peak (``stats["solver_peak"]``) is eq. (2), and every budget at or above ``min_budget`` is met.
"""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import remat
from remat import canonical, simulate, solvers
from remat.lowerset import Poset
from strategies import dags

SLOW = {"milp": 8}  # solvers that are only run on graphs up to this many nodes here


def check_plan(g, plan):
    if plan.schedule:
        sim = simulate(g, plan)
        assert sim.peak == pytest.approx(plan.peak)
        assert sim.recompute_cost == pytest.approx(plan.recompute_cost)
        if plan.budget is not None:
            assert plan.feasible == (plan.peak <= plan.budget * (1 + 1e-9))
    if not plan.feasible:
        return
    if plan.stages is not None:
        p = Poset.of(g)
        canonical.check_sequence(p, canonical.lowers_of_stages(p, plan.stages))
        assert sorted(v for s in plan.stages for v in s) == sorted(g.order)
        assert plan.stats["solver_peak"] == pytest.approx(canonical.peak(g, plan.stages))


@pytest.mark.parametrize("name", [n for n in solvers.names("training") if n != "auto"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=dags(max_nodes=7), frac=st.floats(0.3, 1.5))
def test_every_solver_on_random_dags(name, g, frac):
    if len(g) > SLOW.get(name, 99):
        return
    vanilla = remat.solve(g, None, solver="none")
    for mode in ("time", "memory"):
        try:
            plan = remat.solve(g, round(frac * vanilla.peak), solver=name, mode=mode)
        except ValueError as e:  # blocks: random graphs carry no module paths, and it says so
            assert "module path" in str(e)
            return
        check_plan(g, plan)


def test_unknown_solver_lists_the_known_ones():
    with pytest.raises(ValueError, match="known solvers: .*dp-approx"):
        remat.solve(remat.Graph.chain(3), None, solver="magic")


@pytest.mark.parametrize("name", [n for n in solvers.names("training") if n not in ("milp", "kumar-path")])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=dags(max_nodes=7), fracs=st.lists(st.floats(0, 1), min_size=1, max_size=4))
def test_every_budget_from_min_budget_up_is_met(name, g, fracs):
    try:
        low = remat.min_budget(g, solver=name)
    except ValueError as e:
        assert "module path" in str(e)
        return
    top = max(remat.solve(g, None, solver="none").peak, low)
    for f in sorted(fracs):
        budget = low + f * (top - low)
        plan = remat.solve(g, budget, solver=name)
        assert plan.feasible and plan.peak <= budget * (1 + 1e-9), (budget, plan.message)
        check_plan(g, plan)


@pytest.mark.parametrize("name", [n for n in solvers.names("training") if n not in ("milp", "dp-exhaustive")])
def test_every_solver_honours_a_time_limit(name):
    """``remat.solve(..., time_limit=...)``: a solver that takes a time limit gets it, any other
    is stopped from outside; either way a Plan comes back saying what was cut short (a limit of
    a millisecond on the 176-node ResNet-50 graph cuts every one of them short)."""
    from pathlib import Path

    g = remat.Graph.from_json(Path(__file__).resolve().parents[1] / "bench" / "graphs" / "resnet50.json")
    vanilla = simulate(g, remat.solve(g, None, solver="none")).peak
    try:
        plan = remat.solve(g, 0.5 * vanilla, solver=name, time_limit=1e-3)
    except remat.errors.SolverError as e:  # the per-block solvers need module paths
        assert "module paths" in str(e)
        return
    assert plan.stats.get("cut_short"), plan.stats
    if plan.feasible:
        check_plan(g, plan)
