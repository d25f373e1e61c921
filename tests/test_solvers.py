"""The shared checker: every registered training solver on random DAGs (STYLE.md §6).

For each solver and graph: a feasible plan fits its budget under its own model, its schedule
passes the simulator, stage plans are increasing lower-set sequences ending in V whose peak is
eq. (2), and the simulated recompute cost equals the one the plan reports.
"""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import remat
from remat import canonical, simulate, solvers
from remat.lowerset import Poset
from strategies import dags

SLOW = {"milp": 8}  # solvers that are only run on graphs up to this many nodes here


def check_plan(g, plan):
    if not plan.feasible:
        return
    if plan.budget is not None:
        assert plan.peak <= plan.budget * (1 + 1e-9)
    sim = simulate(g, plan)
    assert sim.recompute_cost == pytest.approx(plan.recompute_cost)
    if plan.stages is not None:
        p = Poset.of(g)
        canonical.check_sequence(p, canonical.lowers_of_stages(p, plan.stages))
        assert sorted(v for s in plan.stages for v in s) == sorted(g.order)
        assert plan.peak == pytest.approx(canonical.peak(g, plan.stages))


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
