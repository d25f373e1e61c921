"""``remat compare GRAPH.json --budget B [--solvers a,b] [--time-limit S] [--json]``.

Every applicable training solver on one graph and budget, judged on one scale: the simulator
(``remat.simulate``). Per solver: whether its plan is feasible, its simulated peak and whether
that fits the budget, its recompute cost, its gap to ``milp`` where milp proved optimality, and
its solve time. A solver that refuses the graph (too many nodes or lower sets) gets a row with
its reason instead of numbers; ``auto`` is left out, since it is the best of the others.

The budget is graph units (bytes for captured graphs), a size (4GiB), a percentage of the
vanilla simulated peak (40%) or a fraction of it (0.4). A report: the exit code is 0 even when
no solver fits (``remat solve`` exits 1 then).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from .. import progress, solvers
from ..budget import parse, parse_budget  # noqa: F401 - remat.commands.compare.parse_budget, as before
from ..errors import InputError, UnknownSolverError
from ..graph import Graph
from ..simulate import simulate, simulate_training
from ..schedule import vanilla
from ..solvers.common import within
from ._output import add_json_arguments, emit_json, percent, size, table, text

NAME = "compare"
HELP = "every training solver on one graph and budget: peak, recompute cost, gap to milp, time"
TINY = 1e-12


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", help="graph JSON file (format remat-graph/1)")
    p.add_argument("--budget", required=True,
                   help="graph units (bytes for captured graphs), a size (4GiB, 512MB), a percentage of the "
                        "vanilla peak (40%%) or a fraction of it (0.4)")
    p.add_argument("--solvers", default=None,
                   help="comma-separated solver names (default: every training solver but auto)")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds for milp (default 60)")
    p.add_argument("--mode", choices=["time", "memory"], default="time")
    add_json_arguments(p)


def solver_names(arg: str | None) -> list[str]:
    known = solvers.names("training")
    if arg is None:
        return [n for n in known if n != "auto"]
    chosen = [s.strip() for s in arg.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in known]
    if unknown:
        raise UnknownSolverError(f"--solvers names unknown training solver(s) {', '.join(unknown)}; known: "
                                 f"{', '.join(known)}: give a comma-separated subset of these")
    return chosen


def run_one(graph: Graph, name: str, budget: float, mode: str, time_limit: float) -> dict[str, Any]:
    """One row: the solver's plan judged by the simulator; a refusal is reported, not raised."""
    options = {"time_limit": time_limit} if name == "milp" else {}
    started = time.perf_counter()
    try:
        plan = solvers.get(name).fn(graph, budget, mode=mode, problem="training", **options)
    except (ValueError, RuntimeError, MemoryError) as e:
        return {"solver": name, "feasible": None, "status": "refused", "simulated_peak": None,
                "fits": None, "recompute_cost": None, "gap_to_milp": None,
                "seconds": time.perf_counter() - started, "note": str(e)}
    seconds = time.perf_counter() - started
    sim = simulate(graph, plan) if plan.schedule else None
    return {"solver": name, "feasible": plan.feasible, "status": plan.status,
            "simulated_peak": sim.peak if sim else None,
            "fits": within(sim.peak, budget) if sim else False,
            "recompute_cost": sim.recompute_cost if sim else None, "gap_to_milp": None,
            "seconds": seconds, "note": plan.message}


def add_gaps(rows: list[dict[str, Any]]) -> float | None:
    """Fill gap_to_milp = (cost - milp)/max(milp, tiny) for fitting rows when milp is optimal."""
    milp = next((r for r in rows if r["solver"] == "milp"), None)
    if milp is None or milp["status"] != "optimal" or not milp["fits"]:
        return None
    best = milp["recompute_cost"]
    for r in rows:
        if r["fits"]:
            r["gap_to_milp"] = (r["recompute_cost"] - best) / max(best, TINY)
    return best


def run(args: argparse.Namespace) -> int:
    parsed = parse(args.budget, "--budget")
    names = solver_names(args.solvers)
    if not args.time_limit > 0:
        raise InputError(f"--time-limit must be > 0 seconds, got {args.time_limit}: give the seconds milp may "
                         f"take, e.g. --time-limit 60")
    g = Graph.from_json(args.graph)
    vanilla_peak = simulate_training(g, vanilla(g)).peak
    budget = parsed.resolve(vanilla_peak)
    rows = _run_all(g, names, budget, args.mode, args.time_limit)
    milp_cost = add_gaps(rows)
    if args.json:
        emit_json({"graph": g.name, "nodes": len(g), "budget": budget, "mode": args.mode,
                   "vanilla_peak": vanilla_peak, "milp_optimal_cost": milp_cost, "rows": rows})
        return 0
    _print_table(g, budget, vanilla_peak, rows)
    return 0


def _run_all(g: Graph, names: list[str], budget: float, mode: str, time_limit: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with progress.task(f"{len(names)} solvers on {g.name}", total=len(names)) as bar:
        for n in names:
            bar.note(n)
            rows.append(run_one(g, n, budget, mode, time_limit))
            bar.advance()
    return rows


def _print_table(g: Graph, budget: float, vanilla_peak: float, rows: list[dict[str, Any]]) -> None:
    def gap(r: dict[str, Any]) -> str:
        if r["gap_to_milp"] is None:
            return "-"
        return "+inf" if r["gap_to_milp"] * TINY >= 1e-3 else f"{100 * r['gap_to_milp']:+.1f}%"  # milp cost 0

    cols = ["solver", "status", "feasible", "fits", "peak", "recompute", "gap", "seconds"]
    table(f"{g.name}: {len(g)} nodes, budget {size(budget)} ({percent(budget, vanilla_peak)} of the vanilla "
          f"peak {size(vanilla_peak)})", cols,
          [(r["solver"], r["status"], r["feasible"], r["fits"], size(r["simulated_peak"]), r["recompute_cost"],
            gap(r), round(r["seconds"], 3)) for r in rows])
    text("peak and recompute: simulated (remat.simulate); gap: recompute cost relative to milp's optimum")
    for r in rows:
        if r["status"] == "refused":
            text(f"{r['solver']}: skipped, {r['note']}")
    if not any(r["solver"] == "milp" and r["status"] == "optimal" for r in rows):
        text("gap to milp: '-' because milp did not prove optimality (or was not run)")
