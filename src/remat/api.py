"""The planning front-end: ``solve`` and ``min_budget``, dispatching through the registry."""

from __future__ import annotations

import math
import time
from typing import Any

from . import progress, solvers
from .budget import parse as parse_budget_syntax
from .errors import BudgetError, InputError, SolverError
from .graph import Graph, GraphError
from .plan import Plan


def solve(graph: Graph, budget: float | str | None = None, solver: str = "dp-approx",
          mode: str = "time", problem: str = "training", **options: Any) -> Plan:
    """Plan one training step of ``graph`` within ``budget`` (None: unlimited).

    ``budget``: graph units (bytes for captured graphs), a size (``"2GiB"``), a percentage of
    the vanilla simulated peak (``"40%"``) or a fraction of it (a number in (0, 1)); see
    ``remat.budget``.

    An infeasible budget is not an exception: the Plan has ``feasible=False`` and its message
    names the smallest budget this solver can meet.
    """
    graph.validate()
    budget = _graph_budget(graph, budget, problem)
    if mode not in ("time", "memory"):
        raise InputError(f"mode must be 'time' or 'memory', got {mode!r}")
    spec = solvers.get(solver)
    if problem not in spec.problems:
        raise SolverError(f"solver {solver!r} does not solve the {problem!r} problem; "
                          f"solvers that do: {', '.join(solvers.names(problem))}")
    started = time.perf_counter()
    with progress.task(f"{solver} on {graph.name} ({len(graph)} nodes)"):
        plan = spec.fn(graph, budget, mode=mode, problem=problem, **options)
    plan.solve_seconds = time.perf_counter() - started
    if not plan.feasible and budget is not None and problem == "training" and not plan.message:
        best = min_budget(graph, solver=solver, mode=mode, **options)
        plan.stats["min_budget"] = best
        plan.message = (f"no {solver} plan fits budget {budget:g}; the smallest budget it can meet "
                        f"is {best:g}")
    return plan


def _graph_budget(graph: Graph, budget: Any, problem: str) -> float | None:
    """None, or ``budget`` in graph units: relative budgets are of the vanilla simulated peak."""
    if budget is None:
        return None
    parsed = parse_budget_syntax(budget)
    if not parsed.relative:
        return parsed.value
    if problem != "training":
        raise BudgetError(f"budget {budget!r} is relative to the vanilla training peak, which the {problem!r} "
                          f"problem does not have: give the budget in graph units")
    from .schedule import vanilla
    from .simulate import simulate_training

    return parsed.resolve(simulate_training(graph, vanilla(graph)).peak)


def min_budget(graph: Graph, solver: str = "dp-approx", mode: str = "time", **options: Any) -> float:
    """Smallest budget with a feasible plan, by binary search (seed 000 §5.1).

    Returns the peak of the plan found at that budget, so ``solve(g, min_budget(g))`` is
    feasible. Feasibility is assumed monotone in the budget, as it is for every solver here.
    """
    graph.validate()
    spec = solvers.get(solver)

    def attempt(b: float | None) -> Plan:
        return spec.fn(graph, b, mode=mode, problem="training", **options)

    with progress.task(f"min-budget of {solver} on {graph.name} ({len(graph)} nodes)") as task:
        if spec.min_budget is not None and mode == "time":
            return spec.min_budget(graph, **options)
        return _bisect(graph, solver, attempt, task)


def _bisect(graph: Graph, solver: str, attempt: Any, task: Any) -> float:
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
        task.note(f"trying {_units(mid)}, feasible at {_units(hi)}")
        plan = attempt(mid)
        if plan.feasible:
            hi = best = min(plan.peak, mid)
        else:
            lo = mid
    return best


def _units(x: float) -> str:
    """Graph units for progress notes: KiB/MiB/GiB from 1 KiB up (captured graphs are in bytes)."""
    from .budget import fmt_bytes

    return fmt_bytes(x) if abs(x) >= 1024 else f"{x:g}"
