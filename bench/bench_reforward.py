"""Speed of the Re-forwarding solver (seed 003, Table 2) on the paper's largest networks.

    .venv/bin/python bench/bench_reforward.py [--repeat 3] [--out bench/results/reforward_speed.json]

Graphs (batch 1, float32 bytes, 224x224 input; cost 10 per convolution, 1 otherwise):

- ``resnet152``, ``densenet201`` and ``customnet`` (seed 003's net without splitting vertices,
  the zoo's version of it) from ``remat.zoo.graph`` (seed 000's abstract graphs: one
  node per layer op, out-of-place ReLU, DenseNet concatenating sequentially, x = cat(x, new)).
- ``densenet201-catall``: a private generator of torchvision's DenseNet201 as seed 003 traced it:
  every dense layer concatenates *all* previous features afresh (``cat(x0, y1..y_{k-1})``) and
  ReLU is in place (fused into the BatchNorm before it). This gives 510 vertices, close to the
  506 of the paper's Table 2, and dense blocks with no splitting vertex (type-3 closed sets, the
  slow Algorithm 4 path); the zoo's sequential form splits at every concatenation.

For each graph: solver time (``reforward.solve_arbitrary``, Algorithm 5 alone on a graph whose
order is already cached, median of ``--repeat`` runs) and the full ``remat.solve`` time (plus
lowering to a schedule and simulating it), the eq. (1) objective, the simulated peak of the plan
and of the vanilla step (``solver="none"``), and the recompute cost against the forward cost.
Paper's Table 2 runtimes (one i7-8700 core): ResNet152 59.34 s (363 vertices), DenseNet201
7335.35 s (506 vertices).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import remat
from remat.graph import Graph
from remat.simulate import simulate
from remat.solvers import reforward
from remat.machine import machine_info

PAPER_SECONDS = {"resnet152": 59.34, "densenet201": 7335.35, "densenet201-catall": 7335.35,
                 "customnet": 0.05}
TARGET_SECONDS = {"resnet152": 5.0, "densenet201": 60.0, "densenet201-catall": 60.0}
# Table 2's "theoretical memory cut off" (1 - eq. (1) / regular memory)
PAPER_CUT = {"resnet152": 0.84, "densenet201": 0.86, "densenet201-catall": 0.86, "customnet": 0.68}


def densenet_catall(blocks: tuple[int, ...] = (6, 12, 48, 32), growth: int = 32,
                    size: int = 224, stem: int = 64, bn_size: int = 4) -> Graph:
    """torchvision-style DenseNet: each layer reads cat(all previous features); ReLU in place."""
    g = Graph(name=f"densenet-catall{'-'.join(map(str, blocks))}")

    def add(name: str, channels: int, side: int, op: str, inputs: list[str]) -> str:
        g.add_node(name, 4 * channels * side * side, 10 if op == "conv" else 1, inputs, op=op)
        return name

    side = size // 2
    x = add("conv0", stem, side, "conv", [])
    x = add("norm0", stem, side, "batchnorm", [x])
    side //= 2
    x = add("pool0", stem, side, "maxpool", [x])
    channels = stem
    for b, layers in enumerate(blocks, start=1):
        feats, width = [x], channels
        for k in range(1, layers + 1):
            p = f"b{b}l{k}"
            cat = add(f"{p}.cat", width, side, "concat", feats)
            h = add(f"{p}.norm1", width, side, "batchnorm", [cat])
            h = add(f"{p}.conv1", bn_size * growth, side, "conv", [h])
            h = add(f"{p}.norm2", bn_size * growth, side, "batchnorm", [h])
            feats.append(add(f"{p}.conv2", growth, side, "conv", [h]))
            width += growth
        x, channels = add(f"b{b}.out", width, side, "concat", feats), width
        if b < len(blocks):
            x = add(f"t{b}.norm", channels, side, "batchnorm", [x])
            channels //= 2
            x = add(f"t{b}.conv", channels, side, "conv", [x])
            side //= 2
            x = add(f"t{b}.pool", channels, side, "avgpool", [x])
    x = add("norm5", channels, side, "batchnorm", [x])
    x = add("pool5", channels, 1, "avgpool", [x])
    x = add("fc", 1000, 1, "linear", [x])
    g.add_node("loss", 4, 1, [x], op="loss")
    return g


def load(name: str) -> Graph:
    if name == "densenet201-catall":
        return densenet_catall()
    import remat.zoo

    return remat.zoo.graph(name, batch=1)


def measure(name: str, repeat: int) -> dict:
    g = load(name)
    g.order  # Graph validates (cycle check) and caches its order once; not part of the solver
    times, tree = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        tree = reforward.solve_arbitrary(g)
        times.append(time.perf_counter() - started)
    started = time.perf_counter()
    plan = remat.solve(g, None, solver="reforward")
    plan_seconds = time.perf_counter() - started
    vanilla = simulate(g, remat.solve(g, None, solver="none"))
    return {
        "graph": name, "vertices": len(g), "edges": sum(len(g[v].inputs) for v in g.order),
        "solver_seconds_median": statistics.median(times), "solver_seconds": times,
        "plan_seconds": plan_seconds,
        "target_seconds": TARGET_SECONDS.get(name), "paper_seconds": PAPER_SECONDS[name],
        "cut_vs_total_mem": 1 - plan.peak / g.total_mem(), "paper_theoretical_cut": PAPER_CUT[name],
        "objective_eq1": plan.peak, "solver_objective": tree.objective,
        "stored_mem": tree.stored_mem, "max_term": tree.max_term, "kept": len(plan.kept),
        "max_terms_tried": tree.max_terms_tried, "division_tree_nodes": tree.tree_nodes,
        "simulated_peak": plan.stats["simulated_peak"], "recompute_cost": plan.recompute_cost,
        "forward_cost": g.total_cost(), "total_activation_mem": g.total_mem(),
        "vanilla_simulated_peak": vanilla.peak,
        "objective_over_vanilla_peak": plan.peak / vanilla.peak,
        "simulated_over_vanilla_peak": plan.stats["simulated_peak"] / vanilla.peak,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+",
                        default=["resnet152", "densenet201", "densenet201-catall", "customnet"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "reforward_speed.json"))
    args = parser.parse_args(argv)
    rows = []
    for name in args.graphs:
        row = measure(name, args.repeat)
        rows.append(row)
        print(f"{name:20s} {row['vertices']:4d} vertices  solver {row['solver_seconds_median']:.2f} s "
              f"(paper {row['paper_seconds']} s)  eq.1 {row['objective_eq1']:.4g}  simulated "
              f"{row['simulated_peak']:.4g}  vanilla {row['vanilla_simulated_peak']:.4g}  "
              f"cut {row['cut_vs_total_mem']:.0%} (paper {row['paper_theoretical_cut']:.0%})",
              flush=True)
    result = {"command": " ".join([sys.executable, *sys.argv]) if argv is None else
              " ".join(["bench/bench_reforward.py", *argv]),
              "machine": machine_info(), "units": "bytes (batch 1, float32); seconds", "results": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
