"""Seed 002 §4.4 on chains: chen-recursive's memory grows O(log n), its extra work O(n log n).

    .venv/bin/python bench/bench_chen_recursive.py [--quick] [--max-n 100000]

writes bench/results/chen_recursive.json and chen_recursive.png.

Graphs: ``Graph.chain(n)``, unit memory and unit cost per node, n = 10^2 .. 10^5 (``--max-n``).
For each n and k (stored values per level; k = 1 is the paper's g(n) = log2 n), the schedule of
``chen-recursive`` is simulated by ``remat.simulate``: peak (values and gradients, in units of
one node) and recompute cost (forward work redone, in units of one node's forward). Fits, by
least squares:

- peak(n) = a + b log2 n; §4.4 predicts b = k / log2(k + 1) (1, 1.26, 1.5 for k = 1, 2, 3). The
  power law peak = c n^e is fitted too: e near 0 is the check that growth is not polynomial.
- recompute(n) / n = a + b log2 n, i.e. extra work = n (a + b log2 n), O(n log n). Each of the
  log_{k+1} n levels re-forwards the k of its k + 1 parts that are not the last, so the predicted
  b is k / ((k + 1) log2(k + 1)) (0.5, 0.42, 0.375).

The vanilla step (``solver="none"``) needs n + 2 units. Seconds are wall time of one
``remat.solve`` (plan + simulation) on a shared 2-core machine: indicative only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

import remat
from remat.graph import Graph
from remat.machine import provenance

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def measure(n: int, k: int) -> dict:
    g = Graph.chain(n)
    started = time.perf_counter()
    plan = remat.solve(g, None, solver="chen-recursive", k=k)
    seconds = time.perf_counter() - started
    return {"n": n, "k": k, "peak": plan.peak, "recompute": plan.recompute_cost,
            "recompute_per_node": plan.recompute_cost / n, "vanilla_peak": n + 2,
            "depth": plan.stats["depth"], "max_mirror_count": plan.stats["max_mirror_count"],
            "steps": len(plan.schedule), "seconds": round(seconds, 2)}


def fit(xs: list[float], ys: list[float]) -> dict:
    """Least squares y = a + b x, with R^2."""
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    b, a = np.polyfit(x, y, 1)
    res = y - (a + b * x)
    ss = float(((y - y.mean()) ** 2).sum())
    return {"a": float(a), "b": float(b), "r2": 1 - float((res ** 2).sum()) / ss if ss else 1.0}


def fits(rows: list[dict], k: int) -> dict:
    ns = [r["n"] for r in rows]
    log2n = [math.log2(n) for n in ns]
    peak = fit(log2n, [r["peak"] for r in rows])
    power = fit([math.log(n) for n in ns], [math.log(r["peak"]) for r in rows])
    work = fit(log2n, [r["recompute_per_node"] for r in rows])
    return {"k": k, "peak_vs_log2n": peak, "predicted_slope": k / math.log2(k + 1),
            "peak_power_law_exponent": power["b"], "recompute_per_node_vs_log2n": work,
            "predicted_recompute_slope": k / (k + 1) / math.log2(k + 1)}


def plot(rows: list[dict], summary: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for f in summary:
        k = f["k"]
        mine = [r for r in rows if r["k"] == k]
        ns = np.array([r["n"] for r in mine], float)
        grid = np.logspace(math.log10(ns.min()), math.log10(ns.max()), 50)
        p = f["peak_vs_log2n"]
        color = f"C{k - 1}"
        axes[0].plot(ns, [r["peak"] for r in mine], "o", color=color, label=f"k={k}")
        axes[0].plot(grid, p["a"] + p["b"] * np.log2(grid), "-", color=color, alpha=.6,
                     label=f"{p['a']:.1f} + {p['b']:.2f} log2 n (R²={p['r2']:.3f})")
        w = f["recompute_per_node_vs_log2n"]
        axes[1].plot(ns, [r["recompute_per_node"] for r in mine], "o", color=color, label=f"k={k}")
        axes[1].plot(grid, w["a"] + w["b"] * np.log2(grid), "-", color=color, alpha=.6,
                     label=f"{w['a']:.2f} + {w['b']:.2f} log2 n (R²={w['r2']:.3f})")
    axes[0].set(xscale="log", xlabel="chain length n", ylabel="simulated peak (node units)",
                title="chen-recursive peak memory: O(log n)")
    axes[1].set(xscale="log", xlabel="chain length n", ylabel="recompute cost / n (forwards)",
                title="extra forward work / n: O(log n), i.e. O(n log n) in all")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n up to 1000 (a smoke run)")
    ap.add_argument("--max-n", type=int, default=100_000, help="largest chain for k = 1")
    ap.add_argument("--max-n-k", type=int, default=10_000, help="largest chain for k = 2, 3")
    ap.add_argument("--out", default=str(RESULTS), help="results folder")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    top = 1000 if args.quick else args.max_n
    sizes = [n for n in (100, 300, 1000, 3000, 10_000, 30_000, 100_000) if n <= top]
    rows = []
    for k in (1, 2, 3):
        for n in sizes:
            if k > 1 and n > (1000 if args.quick else args.max_n_k):
                continue
            rows.append(measure(n, k))
            print(json.dumps(rows[-1]), flush=True)
    summary = [fits([r for r in rows if r["k"] == k], k) for k in (1, 2, 3)]
    result = {**provenance(argv if argv is not None else sys.argv),
              "graphs": "Graph.chain(n): unit memory, unit cost", "rows": rows, "fits": summary,
              "note": "peak in units of one node (values + gradients, remat.simulate); recompute in "
                      "node forwards; vanilla needs n + 2. seconds: one remat.solve on a shared 2-core "
                      "machine, indicative only"}
    (out / "chen_recursive.json").write_text(json.dumps(result, indent=1))
    plot(rows, summary, out / "chen_recursive.png")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
