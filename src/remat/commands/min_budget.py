"""``remat min-budget GRAPH.json --solver S [--mode M] [--json]``."""

from __future__ import annotations

import argparse
import time

from ..api import min_budget
from ..graph import Graph
from ._output import emit_json

NAME = "min-budget"
HELP = "smallest budget with a feasible plan (binary search, seed 000 §5.1)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", help="graph JSON file (format remat-graph/1)")
    p.add_argument("--solver", default="dp-approx")
    p.add_argument("--mode", choices=["time", "memory"], default="time")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    g = Graph.from_json(args.graph)
    t0 = time.perf_counter()
    b = min_budget(g, solver=args.solver, mode=args.mode)
    secs = time.perf_counter() - t0
    if args.json:
        emit_json({"graph": g.name, "solver": args.solver, "mode": args.mode, "min_budget": b, "seconds": secs})
    else:
        print(f"{g.name}: smallest {args.solver} ({args.mode}) budget = {b:g}  ({secs:.2f} s)")
    return 0
