"""``remat solve GRAPH.json [--budget B] [--solver S] [--mode M] [--time-limit S] [--json | --json-full]``.

Plans one training step of a graph file within a budget and judges the plan with the simulator.
The budget is graph units (bytes for captured graphs), a size (4GiB, 512MB), a percentage of
the vanilla simulated peak (40%) or a fraction of it (0.4). Exit code 1 when no plan of the
solver fits the budget (the message names the smallest budget it can meet), 2 on an error.
"""

from __future__ import annotations

import argparse

from ._output import add_json_arguments, emit_json, fmt, percent, seconds, size, table, text

NAME = "solve"
HELP = "plan one training step of a graph within a budget"


def add_solver_argument(p: argparse.ArgumentParser, default: str, problem: str = "training") -> None:
    """``--solver`` with the registered names as its choices."""
    from .. import solvers

    names = solvers.names(problem)
    p.add_argument("--solver", default=default, choices=names, metavar="SOLVER",
                   help=f"one of: {', '.join(names)} (default {default})")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", help="graph JSON file (format remat-graph/1)")
    p.add_argument("--budget", default=None,
                   help="graph units (bytes for captured graphs), a size (4GiB, 512MB), a percentage of the "
                        "vanilla peak (40%%) or a fraction of it (0.4); default: unlimited")
    add_solver_argument(p, "dp-approx")
    p.add_argument("--mode", choices=["time", "memory"], default="time")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="stop the solver after this long and take its best plan so far (auto: default 30)")
    add_json_arguments(p, full="the schedule, stages and kept values")


def vanilla_peak(g) -> float:  # noqa: ANN001 - a Graph
    from ..schedule import vanilla
    from ..simulate import simulate_training

    return simulate_training(g, vanilla(g)).peak


def gap_to_milp(plan) -> str:  # noqa: ANN001 - a Plan
    """auto's recompute cost over milp's bound: relative, then absolute, bound and milp's status."""
    s = plan.stats
    rel = s.get("gap_to_milp_bound")
    return (f"{'-' if rel is None else f'{rel:.1%}'} ({fmt(plan.recompute_cost - s['milp_bound'])} over "
            f"the bound {fmt(s['milp_bound'])}; milp {s.get('milp_status')})")


def run(args: argparse.Namespace) -> int:
    from ..api import solve
    from ..budget import parse
    from ..graph import Graph
    from ..simulate import simulate

    budget = None if args.budget is None else parse(args.budget, "--budget")
    g = Graph.from_json(args.graph)
    base = vanilla_peak(g)
    units = None if budget is None else budget.resolve(base)
    extra = {} if args.time_limit is None else {"time_limit": args.time_limit}
    plan = solve(g, units, solver=args.solver, mode=args.mode, **extra)
    sim = simulate(g, plan) if plan.schedule else None
    code = 0 if plan.feasible else 1
    if args.json or args.json_full:
        record = plan.to_json()
        if not args.json_full:
            for key in ("schedule", "stages", "kept"):
                record.pop(key, None)
            record.update(schedule_steps=len(plan.schedule), kept_values=len(plan.kept))
        emit_json({"graph": g.name, "nodes": len(g), "vanilla_peak": base, **record,
                   "simulated": sim.to_json() if sim else None}, full=args.json_full)
        return code
    rows = [("budget", "unlimited" if units is None else f"{size(units)} ({percent(units, base)} of vanilla)"),
            *([("chosen", plan.stats["chosen"])] if plan.stats.get("chosen") else []),  # auto's pick
            ("feasible", fmt(plan.feasible)),
            ("simulated peak", "-" if sim is None else f"{size(sim.peak)} ({percent(sim.peak, base)})"),
            ("solver's own peak", size(plan.stats.get("solver_peak", plan.peak))),
            ("vanilla peak", size(base)),
            ("recompute cost", fmt(plan.recompute_cost)),
            ("stages", fmt(plan.num_stages)),
            ("solve time", seconds(plan.solve_seconds))]
    if plan.stats.get("cut_short"):
        cut = plan.stats["cut_short"]
        rows.append(("cut short", "; ".join(f"{k}: {v}" for k, v in cut.items()) if isinstance(cut, dict) else str(cut)))
    if "milp_bound" in plan.stats:  # auto on a small graph: how far above milp's proven bound
        rows.append(("gap to MILP bound", gap_to_milp(plan)))
    table(f"{args.solver} ({args.mode}) on {g.name}, {len(g)} nodes", ["field", "value"], rows)
    if plan.message:
        text(plan.message)
    return code
