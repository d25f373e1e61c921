"""How far the MILP yardstick (``remat.solvers.milp``) reaches: solve time, status and proven gap
on chains, residual stacks and random DAGs of 10, 20 and 40 forward nodes, at budgets between
milp's least peak and the vanilla peak, next to ``auto`` (the best of the fast solvers).

    .venv/bin/python bench/bench_milp.py [--quick] [--time-limit S] [--out PATH]

writes bench/results/milp_scaling.json (with the machine and the exact command). Timings on a
shared machine drift: they say which sizes HiGHS proves within the limit, not a speed ranking.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import remat
from remat.graph import Graph
from remat.machine import provenance
from remat.schedule import vanilla
from remat.simulate import simulate, simulate_training
from remat.solvers.milp import min_peak, solve as milp

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
SIZES = (10, 20, 40)
FRACTIONS = (0.25, 0.5)  # budget = least peak + f * (vanilla peak - least peak)


def residual(n: int) -> Graph:
    """Residual blocks x -> a -> r -> c -> s = c + x, with ReLU-sized r half as big."""
    g = Graph(name=f"residual{n}")
    g.add_node("x0", 4, 1)
    prev, k = "x0", 0
    while len(g) + 4 <= n:
        g.add_node(f"a{k}", 4, 2, [prev])
        g.add_node(f"r{k}", 2, 1, [f"a{k}"])
        g.add_node(f"c{k}", 4, 2, [f"r{k}"])
        g.add_node(f"s{k}", 4, 1, [f"c{k}", prev])
        prev, k = f"s{k}", k + 1
    while len(g) < n:
        g.add_node(f"t{len(g)}", 2, 1, [prev])
        prev = f"t{len(g) - 1}"
    return g


def random_dag(n: int, seed: int = 0) -> Graph:
    """Each node reads 1-3 of the 4 nodes before it; sizes and costs 1-5."""
    r = random.Random(seed)
    g = Graph(name=f"random{n}")
    for i in range(n):
        near = [f"v{j}" for j in range(max(0, i - 4), i)]
        inputs = r.sample(near, min(len(near), r.randint(1, 3))) if near else []
        g.add_node(f"v{i}", r.randint(1, 5), r.randint(1, 5), inputs)
    return g


def graphs(sizes: tuple[int, ...]) -> list[Graph]:
    return [make(n) for n in sizes for make in (Graph.chain, residual, random_dag)]


def bench_graph(g: Graph, fractions: tuple[float, ...], time_limit: float) -> list[dict]:
    top = simulate_training(g, vanilla(g)).peak
    t0 = time.perf_counter()
    least = min_peak(g, time_limit=time_limit)
    rows = [{"graph": g.name, "nodes": len(g), "kind": "min_peak", "status": least.status,
             "peak": least.peak, "vanilla_peak": top, "seconds": time.perf_counter() - t0}]
    for f in fractions:
        budget = least.peak + f * (top - least.peak)
        plan = milp(g, budget, time_limit=time_limit)
        auto = remat.solve(g, budget, solver="auto")
        sim = simulate(g, auto) if auto.feasible else None
        rows.append({"graph": g.name, "nodes": len(g), "kind": "solve", "fraction": f, "budget": budget,
                     "status": plan.status, "feasible": plan.feasible, "recompute_cost": plan.recompute_cost,
                     "recompute_lower_bound": plan.stats.get("recompute_lower_bound"),
                     "mip_gap": plan.stats.get("mip_gap"), "seconds": plan.solve_seconds,
                     "source": plan.stats.get("source"),
                     "phases": [{k: p.get(k) for k in ("program", "status", "cost", "seconds")}
                                for p in plan.stats.get("phases", [])],
                     "variables": plan.stats.get("variables"),
                     "integer_variables": plan.stats.get("integer_variables"),
                     "constraints": plan.stats.get("constraints"),
                     "auto_recompute_cost": sim.recompute_cost if sim else None,
                     "auto_solver": auto.stats.get("chosen")})
    return rows


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="10-node graphs only, 10 s limit")
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--out", type=Path, default=RESULTS / "milp_scaling.json")
    args = p.parse_args(argv)
    sizes, limit = ((10,), min(args.time_limit, 10.0)) if args.quick else (SIZES, args.time_limit)
    rows = []
    for g in graphs(sizes):
        rows += bench_graph(g, FRACTIONS, limit)
        last = rows[-1]
        print(f"{g.name}: {last['status']} cost {last['recompute_cost']} in {last['seconds']:.1f} s",
              file=sys.stderr, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**provenance(["bench/bench_milp.py", *(argv or sys.argv[1:])]),
                                    "time_limit": limit, "rows": rows}, indent=1))
    return args.out


if __name__ == "__main__":
    main()
