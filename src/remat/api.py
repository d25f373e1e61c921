"""The planning front-end: ``solve`` and ``min_budget``, dispatching through the registry."""

from __future__ import annotations

import math
import time
from typing import Any

from . import solvers
from .graph import Graph, GraphError
from .plan import Plan


def solve(graph: Graph, budget: float | None = None, solver: str = "dp-approx",
          mode: str = "time", problem: str = "training", **options: Any) -> Plan:
    """Plan one training step of ``graph`` within ``budget`` (None: unlimited).

    An infeasible budget is not an exception: the Plan has ``feasible=False`` and its message
    names the smallest budget this solver can meet.
    """
    graph.validate()
    if budget is not None and (not isinstance(budget, (int, float)) or budget < 0 or math.isnan(budget)):
        raise ValueError(f"budget must be a non-negative number or None, got {budget!r}")
    if mode not in ("time", "memory"):
        raise ValueError(f"mode must be 'time' or 'memory', got {mode!r}")
    spec = solvers.get(solver)
    if problem not in spec.problems:
        raise ValueError(f"solver {solver!r} does not solve the {problem!r} problem; "
                         f"solvers that do: {', '.join(solvers.names(problem))}")
    started = time.perf_counter()
    plan = spec.fn(graph, budget, mode=mode, problem=problem, **options)
    plan.solve_seconds = time.perf_counter() - started
    if not plan.feasible and budget is not None and problem == "training" and not plan.message:
        best = min_budget(graph, solver=solver, mode=mode, **options)
        plan.stats["min_budget"] = best
        plan.message = (f"no {solver} plan fits budget {budget:g}; the smallest budget it can meet "
                        f"is {best:g}")
    return plan


def min_budget(graph: Graph, solver: str = "dp-approx", mode: str = "time", **options: Any) -> float:
    """Smallest budget with a feasible plan, by binary search (seed 000 §5.1).

    Returns the peak of the plan found at that budget, so ``solve(g, min_budget(g))`` is
    feasible. Feasibility is assumed monotone in the budget, as it is for every solver here.
    """
    graph.validate()
    spec = solvers.get(solver)
    if spec.min_budget is not None and mode == "time":
        return spec.min_budget(graph, **options)

    def attempt(b: float | None) -> Plan:
        return spec.fn(graph, b, mode=mode, problem="training", **options)

    top = attempt(None)
    if not top.feasible:
        raise GraphError(f"{solver} finds no plan for {graph.name!r} even without a budget: {top.message}")
    hi, best = top.peak, top.peak
    lo = 0.0
    integral = all(float(graph[v].mem).is_integer() for v in graph.order)
    while hi - lo > (0.5 if integral else 1e-9 * max(hi, 1.0)):
        mid = math.floor((lo + hi) / 2) if integral else (lo + hi) / 2
        if mid <= lo:
            break
        plan = attempt(mid)
        if plan.feasible:
            hi = best = min(plan.peak, mid)
        else:
            lo = mid
    return best
