"""``remat min-budget GRAPH.json [--solver S] [--mode M] [--json]``.

The smallest budget with a feasible plan (binary search, seed 000 §5.1), in graph units (bytes
for captured graphs) and as a percentage of the vanilla simulated peak.
"""

from __future__ import annotations

import argparse
import time

from ._output import add_json_arguments, emit_json, percent, seconds, size, text
from .solve import add_solver_argument, vanilla_peak

NAME = "min-budget"
HELP = "smallest budget with a feasible plan (binary search, seed 000 §5.1)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", help="graph JSON file (format remat-graph/1)")
    add_solver_argument(p, "dp-approx")
    p.add_argument("--mode", choices=["time", "memory"], default="time")
    add_json_arguments(p)


def run(args: argparse.Namespace) -> int:
    from ..api import min_budget
    from ..graph import Graph

    g = Graph.from_json(args.graph)
    base = vanilla_peak(g)
    t0 = time.perf_counter()
    b = min_budget(g, solver=args.solver, mode=args.mode)
    secs = time.perf_counter() - t0
    if args.json:
        emit_json({"graph": g.name, "solver": args.solver, "mode": args.mode, "min_budget": b,
                   "vanilla_peak": base, "fraction_of_vanilla": b / base if base else None, "seconds": secs})
    else:
        text(f"{g.name}: smallest {args.solver} ({args.mode}) budget = {size(b)} ({percent(b, base)} of the "
             f"vanilla peak {size(base)}), found in {seconds(secs)}")
    return 0
