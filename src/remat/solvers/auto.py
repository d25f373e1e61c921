"""``auto``: run the applicable solvers and keep the cheapest plan that fits.

Plans are judged on one scale, the simulator's (``remat.simulate``): a candidate fits when its
simulated peak is within the budget, and the cheapest is the one with the least simulated
recompute cost (ties: the lower peak). Stage-based solvers plan against eq. (2), which
over-estimates what liveness analysis achieves, so they are also tried with relaxed planning
budgets (``relax`` factors); the simulated peak still has to fit the real budget.

Solvers that refuse a graph (too many lower sets, too many nodes) are skipped and noted in
``plan.stats["skipped"]``. The yardsticks (dp-exhaustive, milp) are not run by default.
"""

from __future__ import annotations

import time

from ..graph import Graph
from ..plan import Plan, infeasible
from ..simulate import simulate
from . import get, register

DEFAULT_CANDIDATES = ("dp-approx", "dp-exact", "chen-greedy", "chen-sqrt", "reforward",
                      "twremat", "greedy", "none")
STAGE_SOLVERS = {"dp-approx", "dp-exact"}


@register("auto")
def solve(graph: Graph, budget: float | None = None, mode: str = "time",
          candidates: tuple[str, ...] = DEFAULT_CANDIDATES,
          relax: tuple[float, ...] = (1.0, 1.25, 1.5, 2.0), **options) -> Plan:
    """Every applicable solver; the cheapest plan whose simulated peak fits the budget."""
    started = time.perf_counter()
    tried: list[dict] = []
    skipped: dict[str, str] = {}
    best: tuple[float, float, Plan] | None = None
    for name in candidates:
        try:
            spec = get(name)
        except ValueError:
            continue  # not installed in this build
        factors = relax if (name in STAGE_SOLVERS and budget is not None) else (1.0,)
        modes = ("time", "memory") if name in STAGE_SOLVERS else (mode,)
        for m in modes:
            for f in factors:
                try:
                    plan = spec.fn(graph, None if budget is None else budget * f, mode=m,
                                   problem="training")
                except (ValueError, RuntimeError) as e:
                    skipped[name] = str(e)
                    break
                if not plan.schedule:
                    continue
                sim = simulate(graph, plan)
                fits = budget is None or sim.peak <= budget
                tried.append({"solver": name, "mode": m, "planning_budget": None if budget is None else budget * f,
                              "simulated_peak": sim.peak, "recompute_cost": sim.recompute_cost, "fits": fits})
                if fits and (best is None or (sim.recompute_cost, sim.peak) < best[:2]):
                    best = (sim.recompute_cost, sim.peak, plan)
    if best is None:
        lowest = min((t["simulated_peak"] for t in tried), default=float("inf"))
        return infeasible("auto", budget, f"no solver fits budget {budget:g}; the lowest simulated "
                          f"peak found is {lowest:g}", stats={"tried": tried, "skipped": skipped})
    plan = best[2]
    plan.stats.update({"chosen": plan.solver, "chosen_mode": plan.mode, "tried": tried, "skipped": skipped})
    plan.solver, plan.budget = "auto", budget
    plan.peak = best[1]
    plan.feasible = True
    plan.solve_seconds = time.perf_counter() - started
    return plan
