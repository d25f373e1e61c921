"""Planning speed of the seed 000 solvers on the paper's graphs (issue 2's speed figures).

    .venv/bin/python bench/bench_planning.py [NETWORK ...]

Reads bench/graphs/<name>.json (written by bench/make_graphs.py), times each solver several
times (median), and writes bench/results/planning_speed.json. Seed 000 reports dp-approx under
1 s for all networks and dp-exact over 80 s for GoogLeNet and PSPNet.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import remat
from remat.lowerset import Poset, TooManyLowerSets
from remat.machine import provenance

ROOT = Path(__file__).resolve().parent
NETWORKS = ["resnet50", "resnet152", "vgg19", "densenet161", "googlenet", "googlenet_nobn", "unet", "pspnet"]
EXACT_CAP = 30_000


def timed(fn, repeat: int = 3):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def bench_network(name: str) -> dict:
    g = remat.Graph.from_json(ROOT / "graphs" / f"{name}.json")
    row = {"network": name, "nodes": len(g)}
    try:
        row["lower_sets"] = len(Poset.of(g).lower_sets(cap=EXACT_CAP))
    except TooManyLowerSets:
        row["lower_sets"] = f">{EXACT_CAP}"
    row["vanilla_simulated_peak"] = remat.simulate(g, remat.solve(g, None, solver="none")).peak
    for solver in ("dp-approx", "dp-exact", "chen-greedy"):
        if solver == "dp-exact" and not isinstance(row["lower_sets"], int):
            row[solver] = {"skipped": f"more than {EXACT_CAP} lower sets"}
            continue
        secs_min, b = timed(lambda: remat.min_budget(g, solver=solver), repeat=1)
        entry = {"min_budget": b, "min_budget_seconds": secs_min}
        for mode in ("time", "memory"):
            secs, plan = timed(lambda: remat.solve(g, b, solver=solver, mode=mode))
            sim = remat.simulate(g, plan)
            entry[mode] = {"solve_seconds": secs, "eq2_peak": plan.peak, "simulated_peak": sim.peak,
                           "eq1_overhead": plan.stats["eq1_overhead"], "stages": plan.num_stages,
                           "reduction_vs_vanilla": 1 - sim.peak / row["vanilla_simulated_peak"]}
        row[solver] = entry
    return row


def main() -> None:
    import sys
    rows = []
    for name in sys.argv[1:] or NETWORKS:
        if not (ROOT / "graphs" / f"{name}.json").exists():
            print(f"skip {name}: no bench/graphs/{name}.json (run bench/make_graphs.py)")
            continue
        rows.append(bench_network(name))
        r = rows[-1]
        print(name, r["nodes"], "nodes,", r["lower_sets"], "lower sets;",
              {s: r[s].get("time", {}).get("solve_seconds") for s in ("dp-approx", "dp-exact")})
    suffix = "" if len(sys.argv) == 1 else "_" + "_".join(sys.argv[1:])
    out = ROOT / "results" / f"planning_speed{suffix}.json"
    out.write_text(json.dumps({**provenance(), "rows": rows}, indent=1))
    print("wrote", out)


if __name__ == "__main__":
    main()
