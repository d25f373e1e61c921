"""The planning front-end: ``solve`` and ``min_budget``, dispatching through the registry."""

from __future__ import annotations

import math
import time
from typing import Any

from . import heap, judge, progress, solvers
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

    For training, ``plan.peak``, ``plan.recompute_cost`` and ``plan.feasible`` are those of the
    schedule the runtime executes, whatever the solver, and the plan is the solver's best over
    the planning budgets that fit (``remat.judge``): every budget at or above
    ``min_budget(graph, solver)`` is feasible. An infeasible budget is not an exception: the
    Plan has ``feasible=False`` and its message names the smallest budget this solver can meet.
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
    # auto's gap to the MILP bound: once, for the answer (solvers/auto.py), not at each planning budget
    gap = solver == "auto" and problem == "training" and options.pop("milp_gap", True)
    with heap.frozen(), progress.task(f"{solver} on {graph.name} ({len(graph)} nodes)"):
        if problem == "training":
            plan = judge.answer(graph, budget, solver, mode, **options,
                                **({"milp_gap": False} if solver == "auto" else {}))
            if gap and plan.feasible and not plan.stats.get("floor"):
                _add_gap(graph, budget, plan, started, options)
        else:
            plan = spec.fn(graph, budget, mode=mode, problem=problem, **options)
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _add_gap(graph: Graph, budget: float | None, plan: Plan, started: float, options: dict) -> None:
    """auto's gap to milp's bound, in ``plan.stats`` (``auto.gap_stats``), within what is left of
    auto's time limit (``options``' or its default) since ``started``."""
    from .solvers.auto import DEFAULT_TIME_LIMIT, gap_stats

    limit = options.get("time_limit", DEFAULT_TIME_LIMIT)
    cut: dict[str, str] = {}
    plan.stats.update(gap_stats(graph, budget, plan, started + (math.inf if limit is None else limit), cut))
    if cut:
        before = plan.stats.get("cut_short") or {}
        plan.stats["cut_short"] = {**(before if isinstance(before, dict) else {"search": before}), **cut}


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
    """The smallest budget ``solver`` meets on ``graph``: the executed peak of the least-peak
    plan it makes (``remat.judge.floor``; at its own minimal budget where it has a shortcut, and
    for the DP solvers their memory-centric plans at up to twice it, else found by bisection,
    seed 000 §5.1). ``solve(graph, b, solver)`` is feasible for every
    ``b >= min_budget(graph, solver)``. Infinite when the solver makes no plan at all."""
    graph.validate()
    solvers.get(solver)
    with heap.frozen(), progress.task(f"min-budget of {solver} on {graph.name} ({len(graph)} nodes)"):
        low = judge.floor(graph, solver, mode, **options)
    if low is None:
        raise GraphError(f"{solver} finds no plan for {graph.name!r} even without a budget")
    return low.peak

