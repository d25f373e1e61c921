"""The last of every solver's four steps: wrap a decision (stages or a kept set) into a Plan.

Lowering to a schedule and simulating it happen here, once, for every solver.
"""

from __future__ import annotations

import time

from .. import canonical, schedule
from ..graph import Graph
from ..lowerset import Poset
from ..plan import Plan
from ..simulate import simulate_training


def within(value: float, budget: float | None) -> bool:
    """Budget check with a relative tolerance for float sums (``None`` is unlimited)."""
    return budget is None or value <= budget * (1 + 1e-9) + 1e-12


def stage_plan(graph: Graph, stages: list[list[str]], solver: str, budget: float | None,
               started: float, mode: str | None = None, **stats) -> Plan:
    """Plan of a canonical strategy: peak is eq. (2), stats carry eq. (1) and the simulation."""
    p = Poset.of(graph)
    terms = canonical.stage_terms(p, canonical.lowers_of_stages(p, stages))
    eq2 = max(t.memory for t in terms)
    steps = schedule.from_stages(graph, stages)
    sim = simulate_training(graph, steps)
    kept = p.ids(_union_boundaries(p, stages))
    return Plan(
        solver=solver, budget=budget, feasible=within(eq2, budget), schedule=steps, kept=kept,
        stages=[sorted(s, key=p.pos.__getitem__) for s in stages], peak=eq2,
        recompute_cost=sim.recompute_cost, solve_seconds=time.perf_counter() - started, mode=mode,
        stats={"eq1_overhead": sum(t.overhead for t in terms), "eq2_peak": eq2,
               "simulated_peak": sim.peak, **stats},
    )


def _union_boundaries(p: Poset, stages: list[list[str]]) -> int:
    acc = u = 0
    for s in stages:
        acc |= p.mask(s)
        u |= p.boundary(acc)
    return u


def kept_plan(graph: Graph, kept: list[str], solver: str, budget: float | None, started: float,
              peak: float | None = None, mode: str | None = None, **stats) -> Plan:
    """Plan that caches ``kept`` and recomputes the rest on demand; peak defaults to simulated."""
    steps = schedule.from_kept(graph, kept)
    sim = simulate_training(graph, steps)
    own = sim.peak if peak is None else peak
    return Plan(
        solver=solver, budget=budget, feasible=within(own, budget), schedule=steps,
        kept=[v for v in graph.order if v in set(kept)], peak=own, recompute_cost=sim.recompute_cost,
        solve_seconds=time.perf_counter() - started, mode=mode,
        stats={"simulated_peak": sim.peak, **stats},
    )
