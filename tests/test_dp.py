"""The DP solvers against the exhaustive search of seed 000 §4.1 on random small DAGs.

The algorithms themselves, by their own model (eq. (1) and (2)): the registry's functions and
seed 000 §5.1's minimal budget (``judge.own_min_budget``), not ``remat.solve``'s executed truth.
"""

import pytest
from hypothesis import given, settings, strategies as st

import remat
from remat import canonical, judge, solvers
from strategies import branches
from strategies import dags


def solve(g, budget, solver, mode="time", **options):
    return solvers.get(solver).fn(g, budget, mode=mode, problem="training", **options)


def min_budget(g, solver, mode="time", **options):
    return judge.own_min_budget(g, solver, mode, **options)


def _budget_between(g, frac):
    """A budget between the smallest feasible one and the unconstrained peak."""
    lo = min_budget(g, solver="dp-exhaustive")
    hi = solve(g, None, solver="dp-exhaustive").peak
    return lo + round(frac * (hi - lo))


@settings(max_examples=60, deadline=None)  # up to 6 nodes: dp-exhaustive took 7 to 45 s on 50 draws of up to 7
@given(dags(max_nodes=6), st.floats(0, 1), st.sampled_from(["time", "memory"]))
def test_exact_reaches_the_exhaustive_optimum(g, frac, mode):
    budget = _budget_between(g, frac)
    ref = solve(g, budget, solver="dp-exhaustive", mode=mode)
    exact = solve(g, budget, solver="dp-exact", mode=mode)
    approx = solve(g, budget, solver="dp-approx", mode=mode)
    assert ref.feasible and exact.feasible
    assert exact.stats["eq1_overhead"] == ref.stats["eq1_overhead"]
    assert exact.peak <= budget and ref.peak <= budget
    # dp-approx searches a subfamily: never better than the optimum, within budget when feasible
    if approx.feasible:
        assert approx.peak <= budget
        better = (lambda a, b: a >= b) if mode == "time" else (lambda a, b: a <= b)
        assert better(approx.stats["eq1_overhead"], ref.stats["eq1_overhead"])
    # every plan's figures are eq. (1) and (2) of its own stages
    for plan in (ref, exact, approx):
        if plan.feasible:
            assert plan.peak == canonical.peak(g, plan.stages)
            assert plan.stats["eq1_overhead"] == canonical.overhead(g, plan.stages)


@settings(max_examples=80, deadline=None)
@given(dags(max_nodes=6))
def test_min_budget_agrees_across_dp_solvers(g):
    exact = min_budget(g, solver="dp-exact")
    assert exact == min_budget(g, solver="dp-exhaustive")
    assert min_budget(g, solver="dp-approx") >= exact
    assert solve(g, exact, solver="dp-exact").feasible
    if exact > 1:
        assert not solve(g, exact - 1, solver="dp-exact").feasible


def test_chain_optimum_by_hand():
    # unit chain of 4: the finest partition costs only the last node in eq. (1): T(V_4 \ ∂(V)) = 1
    g = remat.Graph.chain(4)
    plan = solve(g, None, solver="dp-exact")
    assert plan.stages == [["x1"], ["x2"], ["x3"], ["x4"]]
    assert plan.stats["eq1_overhead"] == 1
    assert plan.recompute_cost == 0  # the last stage is not dropped and recomputed
    # memory-centric with no budget: maximal overhead at the minimal budget
    mc = solve(g, None, solver="dp-exact", mode="memory")
    assert mc.peak == min_budget(g, solver="dp-exact")


def test_infeasible_budget_is_a_plan_naming_the_minimum():
    g = remat.Graph.chain(5)
    best = remat.min_budget(g, solver="dp-exact")
    plan = remat.solve(g, best - 1, solver="dp-exact")
    assert plan.feasible is False and plan.peak > best - 1
    assert f"the smallest budget it can meet is {best:g}" in plan.message


def test_exhaustive_refuses_large_graphs():
    with pytest.raises(ValueError, match="dp-exhaustive refuses graphs above 12 nodes"):
        solve(remat.Graph.chain(13), None, solver="dp-exhaustive")


def test_exact_refuses_too_many_lower_sets_with_a_way_out():
    g = remat.Graph()
    for i in range(16):
        g.add_node(f"v{i}", 1, 1)
    with pytest.raises(ValueError, match="dp-approx"):
        solve(g, None, solver="dp-exact", cap=1000)


# ---- time limits: the per-lower-set sweep stops, the plan still fits --------------------------------


def test_subsets_agree_with_the_masks():
    import numpy as np
    from remat.lowerset import Poset
    from remat.solvers import dp

    g = branches(3, 4)
    p = Poset.of(g)
    fam = dp._family(p, True, dp.EXACT_CAP, g)
    rows = np.arange(len(fam.masks))
    for r in range(len(fam.masks)):
        want = [q for q in rows if fam.masks[q] & ~fam.masks[r] == 0]
        assert list(dp._subsets(fam, r, rows)) == want


@pytest.mark.parametrize("frac", [0.5, 0.7])
def test_exact_within_a_tiny_time_limit_returns_a_plan_that_fits(frac):
    import time

    from remat import schedule
    from remat.lowerset import Poset
    from remat.simulate import simulate, simulate_training

    # 2,200 lower sets: 4 s in full, its coarsened sweep after the limit 0.5-0.8 s on an AMD EPYC host, well
    # inside the sweep's 2 s of grace even on a loaded machine (with 3,378 sets, 1.4 s alone, a loaded suite
    # run passed the grace: the sweep stopped, and its plan did not fit)
    g, limit = branches(3, 12), 0.2
    budget = frac * simulate_training(g, schedule.vanilla(g)).peak
    started = time.perf_counter()
    own = solve(g, budget, solver="dp-exact", time_limit=limit)  # the algorithm, by its own model
    judged = remat.solve(g, budget, solver="dp-exact", time_limit=limit)  # the executed schedule
    assert time.perf_counter() - started < 2 * (10 * limit + 5)  # seconds without a limit; generous
    for plan in (own, judged):
        assert "time limit" in plan.stats["cut_short"] and plan.feasible
        p = Poset.of(g)
        canonical.check_sequence(p, canonical.lowers_of_stages(p, plan.stages))
    assert own.peak == canonical.peak(g, own.stages) <= budget
    assert judged.peak == simulate(g, judged).peak <= budget


def test_min_budget_within_a_time_limit_is_a_budget_that_fits():
    import time

    from remat.solvers import dp

    g = branches(3, 14)
    started = time.perf_counter()
    low = dp._dp_min_budget(g, exact=True, time_limit=0.2)
    assert time.perf_counter() - started < 10 * 0.2 + 5
    assert low >= min_budget(g, solver="dp-exact")  # never below the true minimum ...
    assert solve(g, low, solver="dp-exact").feasible  # ... and met


@pytest.mark.parametrize("name", ["dp-approx", "dp-exact"])
def test_an_infeasible_answer_says_why(name):
    """The solver's own infeasible plan names the budget (auto's list of what it tried shows it)."""
    g = remat.Graph()
    g.add_node("a", 10, 1)
    g.add_node("b", 10, 1, ["a"])
    plan = solvers.get(name).fn(g, 1, mode="time", problem="training")
    assert plan.status == "infeasible" and "fits budget 1" in plan.message
