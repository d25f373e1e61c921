"""Planning-only tables of the suite: PREDICTED figures on the papers' abstract graphs.

Every figure here is a prediction: plans are made on ``remat.zoo.graph`` (seed 000's module-level
graphs: one node per layer op, float32 output bytes, cost 10 per convolution and 1 otherwise) and
judged by ``remat.simulate`` (liveness analysis); stage-based solvers also report their own
eq. (2) peak. Time is predicted as ``1 + recompute / (3 * forward cost)``: a step costs one
forward plus a backward of twice its cost (the convention of ``remat.joint``).

- ``table1_predicted``: seed 000 Table 1 (§5.1): vanilla, Chen's method, ExactDP/ApproxDP in
  time- (TC) and memory-centric (MC) mode at the minimal budget (binary search), at the paper's
  batch size; reduction = 1 - peak / vanilla peak.
- ``seed003_tables``: seed 003 Tables 1 and 2: regular vs Chen vs Re-forwarding, memory and
  predicted time overhead; solver runtimes and the theoretical (eq. 1 objective) memory cut.
- ``seed004_depth`` / ``seed004_transformer``: seed 004 Figures 2 and 3 and Table 2: NoRemat,
  GreedyRemat and TWRemat on the schedule problem of the joint forward+backward graph: peak
  M(σ) and schedule length against depth.
- ``tradeoff_predicted``: every training solver over a budget sweep (fractions of vanilla).

Solvers that refuse a graph or fail are recorded as rows with ``status`` and the message, never
dropped silently. Tested in tests/test_bench.py on small graphs against direct solver calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .. import joint, solvers
from ..api import solve
from ..judge import own_min_budget
from ..graph import Graph
from ..simulate import simulate

GraphFn = Callable[..., Graph]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Method:
    """One column of a table: a label and how to plan it."""

    label: str
    solver: str
    mode: str = "time"
    minimal: bool = True  # plan at the solver's minimal budget (seed 000 §5.1); else budget None
    max_nodes: int | None = None  # skipped on graphs with more nodes (the MILP's reach)


TABLE1_METHODS = (
    Method("vanilla", "none", minimal=False),
    Method("chen", "chen-greedy", minimal=False),  # Chen's own grid search picks the budget
    Method("approx-tc", "dp-approx", "time"),
    Method("approx-mc", "dp-approx", "memory"),
    Method("exact-tc", "dp-exact", "time"),
    Method("exact-mc", "dp-exact", "memory"),
)
SEED003_METHODS = (Method("regular", "none", minimal=False),
                   Method("chen", "chen-greedy", minimal=False),
                   Method("reforward", "reforward", minimal=False))
SCHEDULE_SOLVERS = ("none", "greedy", "twremat")
SLOW_SOLVERS = ("dp-exhaustive", "milp")  # yardsticks, exponential or ILP: not in sweeps


def _quiet(_: str) -> None:
    pass


def _paper_batch(net: str) -> int | None:
    from .. import zoo
    try:
        return zoo.spec(net).batch
    except ValueError:
        return None


def forward_cost(graph: Graph) -> float:
    return graph.cost(graph.order)


def predicted_time_ratio(graph: Graph, recompute: float) -> float:
    return 1.0 + recompute / (3.0 * forward_cost(graph))


def vanilla_peak(graph: Graph) -> float:
    return simulate(graph, solve(graph, None, solver="none")).peak


def plan_row(graph: Graph, method: Method, vanilla: float, budget: float | None = None,
             minimal_budgets: dict[str, float] | None = None) -> dict[str, Any]:
    """Plan ``graph`` with ``method`` and judge it; failures become a row with a status.

    ``seconds`` includes the minimal-budget search; ``solve_seconds`` is the final solve only.
    """
    row: dict[str, Any] = {"method": method.label, "solver": method.solver, "mode": method.mode}
    started = time.perf_counter()
    try:
        if method.minimal and budget is None:
            cache = minimal_budgets if minimal_budgets is not None else {}
            if method.solver not in cache:
                # The least budget with a canonical strategy does not depend on the mode.
                cache[method.solver] = own_min_budget(graph, method.solver, "time")
            budget = cache[method.solver]
        solve_started = time.perf_counter()
        # The registry's function itself: api.solve would binary-search the minimal budget
        # only to word the message of an infeasible plan, which a sweep does not need.
        plan = solvers.get(method.solver).fn(graph, budget, mode=method.mode, problem="training")
        solve_seconds = time.perf_counter() - solve_started
    except Exception as e:  # a solver refusing a graph (size caps) is a result, not a crash
        return {**row, "status": "failed", "message": f"{type(e).__name__}: {e}",
                "seconds": time.perf_counter() - started}
    row.update(budget=budget, feasible=plan.feasible, solve_seconds=solve_seconds,
               seconds=time.perf_counter() - started, status="ok" if plan.feasible else "infeasible")
    if not plan.schedule:
        return {**row, "message": plan.message}
    if method.solver == "reforward":
        row["objective"] = plan.peak  # seed 003 eq. (1): its theoretical memory
    sim = simulate(graph, plan)
    eq2 = plan.stats.get("eq2_peak")
    row.update(simulated_peak=sim.peak, eq2_peak=eq2, solver_peak=plan.peak,
               recompute_cost=sim.recompute_cost, reduction=1.0 - sim.peak / vanilla,
               reduction_eq2=None if eq2 is None else 1.0 - eq2 / vanilla,
               time_ratio=predicted_time_ratio(graph, sim.recompute_cost))
    return row


def table1_predicted(networks: Iterable[str], graph_fn: GraphFn, methods: Iterable[Method] = TABLE1_METHODS,
                     exact_networks: Iterable[str] | None = None, batch: dict[str, int] | None = None,
                     progress: Progress = _quiet) -> list[dict[str, Any]]:
    """Seed 000 Table 1, predicted: one row per (network, method).

    ``exact_networks`` limits dp-exact (and dp-exhaustive) to those networks (None: all).
    ``batch`` overrides the paper's batch per network.
    """
    exact = None if exact_networks is None else set(exact_networks)
    rows = []
    for net in networks:
        b = (batch or {}).get(net)
        progress(f"table 1 (predicted): {net} graph")
        g = graph_fn(net, batch=b)
        b = b or _paper_batch(net)
        vanilla = vanilla_peak(g)
        budgets: dict[str, float] = {}
        for m in methods:
            if exact is not None and m.solver in ("dp-exact", "dp-exhaustive") and net not in exact:
                rows.append({"network": net, "method": m.label, "solver": m.solver, "mode": m.mode,
                             "status": "skipped", "message": "dp-exact not run on this network in this suite"})
                continue
            progress(f"table 1 (predicted): {net} {m.label}")
            r = plan_row(g, m, vanilla, minimal_budgets=budgets)
            rows.append({"network": net, "batch": b, "nodes": len(g), "vanilla_peak": vanilla, **r})
    return rows


def seed003_tables(networks: Iterable[str], graph_fn: GraphFn, progress: Progress = _quiet
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Seed 003 Table 1 (memory and time overhead) and Table 2 (solver runtime, cut-offs)."""
    table1, table2 = [], []
    for net in networks:
        progress(f"seed 003: {net}")
        g = graph_fn(net)
        vanilla = vanilla_peak(g)
        rows = {m.label: plan_row(g, m, vanilla) for m in SEED003_METHODS}
        for label, r in rows.items():
            table1.append({"network": net, "nodes": len(g), "vanilla_peak": vanilla, **r})
        ref = rows["reforward"]
        objective = ref.get("objective")
        table2.append({"network": net, "nodes": len(g), "edges": sum(len(g[v].inputs) for v in g.order),
                       "reforward_seconds": ref.get("solve_seconds"), "status": ref.get("status"),
                       "theoretical_cut": None if objective is None else 1.0 - objective / vanilla,
                       "simulated_cut": ref.get("reduction")})
    return table1, table2


def schedule_rows(graph: Graph, label: dict[str, Any]) -> list[dict[str, Any]]:
    """NoRemat, GreedyRemat and TWRemat on the joint graph of ``graph`` (seed 004 §2)."""
    j, end = joint.joint_graph(graph)
    rows, base_len = [], None
    for name in SCHEDULE_SOLVERS:
        plan = solve(j, None, solver=name, problem="schedule", final=end)
        base_len = base_len or len(plan.schedule)
        rows.append({**label, "solver": name, "nodes": len(graph), "joint_nodes": len(j),
                     "peak": plan.peak, "length": len(plan.schedule),
                     "relative_length": len(plan.schedule) / base_len, "solve_seconds": plan.solve_seconds})
    return rows


def seed004_depth(families: dict[str, Iterable[int]], graph_fn: GraphFn,
                  progress: Progress = _quiet) -> list[dict[str, Any]]:
    """Seed 004 Figures 2 and 3: peak and schedule length against depth, per family."""
    rows = []
    for family, depths in families.items():
        for d in depths:
            progress(f"seed 004: {family} depth {d}")
            rows += schedule_rows(graph_fn(family, depth=d), {"family": family, "depth": d})
    return rows


def seed004_transformer(configs: dict[str, dict[str, Any]], graph_fn: GraphFn,
                        progress: Progress = _quiet) -> list[dict[str, Any]]:
    """Seed 004 Table 2: the Transformer, one entry per named configuration."""
    rows = []
    for name, options in configs.items():
        progress(f"seed 004: transformer {name}")
        rows += schedule_rows(graph_fn("transformer", **options), {"config": name, **options})
    return rows


def sweep_solvers() -> list[str]:
    return [s for s in solvers.names("training") if s not in SLOW_SOLVERS]


def tradeoff_predicted(graph: Graph, fractions: Iterable[float], solver_names: Iterable[str] | None = None,
                       progress: Progress = _quiet) -> list[dict[str, Any]]:
    """Every solver over budgets ``fraction * vanilla peak``: predicted memory vs time."""
    vanilla = vanilla_peak(graph)
    rows = []
    for name in solver_names or sweep_solvers():
        for f in fractions:
            progress(f"trade-off (predicted): {graph.name} {name} at {f:.0%}")
            r = plan_row(graph, Method(name, name, minimal=False), vanilla, budget=f * vanilla)
            rows.append({"network": graph.name, "fraction": f, "vanilla_peak": vanilla, **r})
    return rows
