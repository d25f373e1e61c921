"""``remat solve GRAPH.json --budget B --solver S [--mode M] [--json]``."""

from __future__ import annotations

import argparse

from ..api import solve
from ..graph import Graph
from ..simulate import simulate
from ._output import emit_json, table

NAME = "solve"
HELP = "plan one training step of a graph within a budget"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", help="graph JSON file (format remat-graph/1)")
    p.add_argument("--budget", type=float, default=None, help="memory budget (graph units); default unlimited")
    p.add_argument("--solver", default="dp-approx")
    p.add_argument("--mode", choices=["time", "memory"], default="time")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    g = Graph.from_json(args.graph)
    plan = solve(g, args.budget, solver=args.solver, mode=args.mode)
    sim = simulate(g, plan) if plan.schedule else None
    if args.json:
        emit_json({**plan.to_json(), "simulated": sim.to_json() if sim else None})
        return 0
    rows = [("feasible", plan.feasible), ("eq. (2) peak", plan.stats.get("eq2_peak", plan.peak)),
            ("simulated peak", sim.peak if sim else None), ("recompute cost", plan.recompute_cost),
            ("stages", plan.num_stages), ("solve seconds", plan.solve_seconds)]
    table(f"{args.solver} ({args.mode}) on {g.name}, budget {args.budget}", ["field", "value"], rows)
    if plan.message:
        print(plan.message)
    return 0
