"""Chen et al. 2016 (seed 002) Figures 5, 6 and 7, predicted on abstract graphs.

    .venv/bin/python bench/bench_chen_figures.py [--quick]

writes bench/results/chen_figures/{fig5_resnet_memory,fig6_lstm_memory,fig7_time_overhead}.png,
results.json and README.md (our figures beside the paper's).

Graphs: ``remat.zoo.graph`` (one node per layer op, float32 bytes from a META-device trace, costs
= forward FLOPs, ``cost="flops"``), the paper's settings: ResNets of growing depth at batch 32,
224x224 (seed 002 §5.2: "increasing the depth of each residual stage"; 1001 layers = 333
bottleneck blocks), and the 4-layer LSTM, 1024 hidden, 64 steps, batch 64, input 50, 5000
classes (§5.3), swept over the number of steps.

The strategies of §5.1, each a peak of feature maps and gradients (parameters excluded, as in
the paper):

- ``no_optimization``: every forward value and every gradient its own buffer: M(V) + Σ grad sizes;
- ``sharing``: the vanilla step with liveness (``solver="none"`` through ``remat.simulate``):
  in-place and sharing (§3), as our simulator frees each buffer after its last read;
- ``drop_bn_relu``: §4.2 as the paper ran it, BN, activations and pooling dropped by op name
  (``chen-drop-cheap`` with ``threshold=0, max_chain=None``); ``drop_cheap``: the solver's default,
  which also tries dropping other ops below the graph's cost/byte (residual adds,
  concatenations) and bounded chains of dropped nodes, and keeps the least peak;
- ``sublinear``: Alg. 3 with the grid search over B (``chen-greedy``), its schedule simulated;
  ``sublinear_drop``: the same with cheap results dropped inside segments (``chen-drop-cheap-greedy``);
  ``recursive``: §4.4 with k = 1 (``chen-recursive``), for reference.

Figure 7 (time overhead) is predicted: the recompute cost of each plan as a fraction of one
forward + backward step, taking the backward as twice the forward (seed 002 §4.3: "the backward
operation is nearly twice as time consuming as the forward one"), on FLOP costs. Nothing is
measured on a device here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import remat
from remat.graph import Graph
from remat.machine import provenance

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "chen_figures"
GB = 1e9
PAPER = {
    "fig5": "1000-layer ResNet (batch 32, 224x224): 48 GB with the system optimizations -> under 7 GB "
            "with the sublinear plan (abstract; §5.2 'less than 7GB'); sharing and in-place cut memory by "
            "2-3x but stay linear in depth, only ~200 layers fit in a 12 GB Titan X",
    "fig6": "LSTM 4 x 1024 hidden, 64 steps, batch 64: the sublinear plan gives more than 4x reduction over "
            "the optimized (sharing) plan (§5.3)",
    "fig7": "sublinear plan: roughly 30% additional runtime (Titan X, 20 batches, §5.4)",
}
RESNET_DEPTHS = (50, 101, 152, 200, 302, 500, 701, 1001)
LSTM_STEPS = (16, 32, 64, 128)


def strategies(g: Graph, sublinear: bool = True) -> dict:
    """Peak bytes (and predicted time overhead) of each strategy of §5.1 on graph g."""
    t = g.total_cost()
    row: dict = {"nodes": len(g), "forward_cost": t,
                 "no_optimization": g.total_mem() + sum(g[v].grad_size for v in g.order if g[v].requires_grad)}
    runs = {"sharing": ("none", {}), "drop_bn_relu": ("chen-drop-cheap", {"threshold": 0.0, "max_chain": None}),
            "drop_cheap": ("chen-drop-cheap", {})}
    if sublinear:
        runs.update({"sublinear": ("chen-greedy", {}), "sublinear_drop": ("chen-drop-cheap-greedy", {}),
                     "recursive": ("chen-recursive", {})})
    for label, (solver, opts) in runs.items():
        started = time.perf_counter()
        plan = remat.solve(g, None, solver=solver, **opts)
        sim = remat.simulate(g, plan)
        row[label] = sim.peak
        row[f"{label}_overhead"] = sim.recompute_cost / (3 * t)  # forward T + backward 2T
        row[f"{label}_seconds"] = round(time.perf_counter() - started, 2)
    return row


def resnet_rows(depths: tuple[int, ...], batch: int, image_size: int) -> list[dict]:
    from remat import zoo
    rows = []
    for d in depths:
        g = zoo.graph("resnet", batch=batch, cost="flops", depth=d, image_size=image_size)
        rows.append({"depth": d, **strategies(g)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def lstm_rows(steps: tuple[int, ...], batch: int, hidden: int) -> list[dict]:
    from remat import zoo
    rows = []
    for s in steps:
        g = zoo.graph("lstm", batch=batch, cost="flops", steps=s, hidden=hidden, layers=4)
        rows.append({"steps": s, **strategies(g)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


SERIES = [("no_optimization", "no optimization", "s-"), ("sharing", "in-place + sharing (liveness)", "o-"),
          ("drop_bn_relu", "drop bn-relu (§4.2)", "^-"), ("drop_cheap", "drop cheap (cost/byte)", "v--"),
          ("sublinear", "sublinear plan (Alg. 3)", "D-"), ("sublinear_drop", "sublinear + drop cheap", "P-"),
          ("recursive", "recursive, k=1 (§4.4)", "x:")]


def plot(rows: list[dict], x: str, xlabel: str, title: str, path: Path, loglog: bool = True) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 5))
    for key, label, style in SERIES:
        ax.plot([r[x] for r in rows], [r[key] / GB for r in rows], style, label=label)
    if loglog:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel="feature map + gradient memory (GB, predicted)", title=title)
    ax.grid(alpha=.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_overhead(resnet: list[dict], lstm: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, rows, x, xlabel in ((axes[0], resnet, "depth", "ResNet depth (layers)"),
                                (axes[1], lstm, "steps", "LSTM unrolled steps")):
        for key, label, style in SERIES[2:]:
            ax.plot([r[x] for r in rows], [100 * r[f"{key}_overhead"] for r in rows], style, label=label)
        ax.axhline(30, color="grey", ls="--", lw=1, label="paper: ~30% (measured, Titan X)")
        ax.set(xscale="log", xlabel=xlabel, ylabel="recompute / (forward + backward), %",
               title="predicted time overhead (FLOP costs, backward = 2 x forward)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def readme(resnet: list[dict], lstm: list[dict], header: dict) -> str:
    def gb(v: float) -> str:
        return f"{v / GB:.2f}"

    lines = ["# Chen et al. 2016, Figures 5-7: predicted on remat's abstract graphs", "",
             f"Produced by `{header['command']}` on {header['date']}. Graphs: `remat.zoo.graph` "
             "(one node per layer op, float32 bytes, FLOP costs); memory = peak of feature maps and "
             "gradients from `remat.simulate` (parameters excluded, as in the paper); time overhead = "
             "recompute cost / (forward + 2 x forward). Predicted only: nothing measured on a device. "
             "See bench/bench_chen_figures.py for the strategies.", "",
             "## Figure 5: ResNet, batch 32, 224x224 (GB)", "",
             "| depth | nodes | no optimization | sharing | drop bn-relu | drop cheap | sublinear (Alg. 3) "
             "| sublinear + drop | recursive k=1 |", "|---|---|---|---|---|---|---|---|---|"]
    for r in resnet:
        lines.append(f"| {r['depth']} | {r['nodes']} | {gb(r['no_optimization'])} | {gb(r['sharing'])} | "
                     f"{gb(r['drop_bn_relu'])} | {gb(r['drop_cheap'])} | {gb(r['sublinear'])} | "
                     f"{gb(r['sublinear_drop'])} | {gb(r['recursive'])} |")
    lines += ["", f"Paper: {PAPER['fig5']}.", ""]
    if resnet:
        big = resnet[-1]
        lines.append(f"Ours at {big['depth']} layers: sharing {gb(big['sharing'])} GB -> sublinear "
                     f"{gb(big['sublinear'])} GB ({big['sharing'] / big['sublinear']:.1f}x), sublinear + drop "
                     f"{gb(big['sublinear_drop'])} GB; no optimization / sharing = "
                     f"{big['no_optimization'] / big['sharing']:.2f}x. Our layer graph keeps BN and ReLU "
                     "outputs as separate out-of-place values (MXNet ran ReLU in place), so our sharing line "
                     "sits above the paper's 48 GB.")
        if len(resnet) > 1:
            import math
            a, b = resnet[0], resnet[-1]
            slope = {k: math.log(b[k] / a[k]) / math.log(b["depth"] / a["depth"])
                     for k in ("sharing", "drop_bn_relu", "sublinear", "sublinear_drop")}
            lines.append("Log-log slopes from depth {} to {}: ".format(a["depth"], b["depth"])
                         + ", ".join(f"{k} {v:.2f}" for k, v in slope.items())
                         + " (1 = linear, 0.5 = sqrt(n)).")
    lines += ["", "## Figure 6: LSTM, 4 layers x 1024 hidden, batch 64 (GB)", "",
              "| steps | nodes | no optimization | sharing | drop cheap | sublinear (Alg. 3) | sublinear + drop "
              "| recursive k=1 | sharing / sublinear |", "|---|---|---|---|---|---|---|---|---|"]
    for r in lstm:
        lines.append(f"| {r['steps']} | {r['nodes']} | {gb(r['no_optimization'])} | {gb(r['sharing'])} | "
                     f"{gb(r['drop_cheap'])} | {gb(r['sublinear'])} | {gb(r['sublinear_drop'])} | "
                     f"{gb(r['recursive'])} | {r['sharing'] / r['sublinear']:.1f}x |")
    lines += ["", f"Paper: {PAPER['fig6']}. The least any plan can reach here grows linearly with the steps: "
              "the backward step of the final `stack` of the per-step logits holds the stacked logits, their "
              "gradient and one gradient per step, three times all logits (3 x 64 steps x 64 x 5000 x 4 B = "
              "246 MB at 64 steps); the recursion's peak is that step.", "",
              "## Figure 7: time overhead, predicted (% of forward + backward)", "",
              "| network | drop bn-relu | drop cheap | sublinear | sublinear + drop | recursive k=1 |",
              "|---|---|---|---|---|---|"]
    plans = ("drop_bn_relu", "drop_cheap", "sublinear", "sublinear_drop", "recursive")
    for label, r in [(f"ResNet-{r['depth']}", r) for r in resnet] + [(f"LSTM {r['steps']} steps", r) for r in lstm]:
        lines.append(f"| {label} | " + " | ".join(f"{100 * r[k + '_overhead']:.1f}" for k in plans) + " |")
    lines += ["", f"Paper: {PAPER['fig7']}. A sublinear plan recomputes at most one forward pass, i.e. "
              "at most 33% of forward + backward when the backward costs twice the forward; the measured "
              "30% includes kernel speeds that FLOP counts do not see.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two small ResNets and short LSTMs (a smoke run)")
    ap.add_argument("--out", default=str(RESULTS), help="results folder")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        resnet = resnet_rows((50, 101), batch=2, image_size=64)
        lstm = lstm_rows((4, 8), batch=4, hidden=64)
    else:
        resnet = resnet_rows(RESNET_DEPTHS, batch=32, image_size=224)
        lstm = lstm_rows(LSTM_STEPS, batch=64, hidden=1024)
    header = provenance(argv if argv is not None else sys.argv)
    (out / "results.json").write_text(json.dumps(
        {**header, "units": "bytes; overhead = recompute / (3 x forward cost), FLOP costs", "paper": PAPER,
         "fig5_resnet": resnet, "fig6_lstm": lstm}, indent=1))
    plot(resnet, "depth", "ResNet depth (layers)", "Fig. 5: ResNet, batch 32, 224x224 (predicted)",
         out / "fig5_resnet_memory.png")
    plot(lstm, "steps", "unrolled steps", "Fig. 6: LSTM 4 x 1024, batch 64 (predicted)",
         out / "fig6_lstm_memory.png")
    plot_overhead(resnet, lstm, out / "fig7_time_overhead.png")
    (out / "README.md").write_text(readme(resnet, lstm, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
