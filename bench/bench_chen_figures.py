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
measured on a device here: bench/bench_chen_figures_measured.py measures the same strategies on
real models on the CPU (measured.json and the ``*_measured.png`` figures); README.md, written by
either script, shows each figure's paper text, our predicted figure and, where measured.json
exists, the measured one.
"""

from __future__ import annotations

import argparse
import json
import math
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


PAPER_TEXT = {
    "fig5": "*Figure 5: \"The memory cost of different allocation strategies on deep residual net configurations. "
            "The feature map memory cost is generated from static memory allocation plan. We also use nvidia-smi "
            "to measure the total memory cost during runtime (the missing points are due to out of memory).\"* "
            "Setting (§5.2): ResNet (He et al., identity mappings), batch 32, 3x224x224 inputs, deeper nets made "
            "by \"increasing the depth of each residual stage\", log-log axes. In the text: the system "
            "optimizations (in-place, sharing) cut memory \"by factor of two to three\" but stay linear in depth, "
            "\"only possible to train a 200 layer ResNet\" on a 12 GB Titan X; the sublinear plan trains \"a 1000 "
            "layer ResNet using less than 7GB\"; the abstract: 48 GB -> 7 GB at 1,000 layers.",
    "fig6": "*Figure 6: \"The memory cost of different memory allocation strategies on LSTM configurations. System "
            "optimization gives a lot of memory saving on the LSTM graph, which contains a lot of fine grained "
            "operations. The sub-linear plan can give more than 4x reduction over the optimized plan that do not "
            "trade computation with memory.\"* Setting (§5.3): 4-layer LSTM, 1024 hidden, 64 steps, batch 64, "
            "50-dimensional inputs, softmax over 5000 classes per step; x axis: the number of unrolled steps.",
    "fig7": "*Figure 7: \"The runtime speed of different allocation strategy on the two settings. The speed is "
            "measured by a running 20 batches on a Titan X GPU. We can see that using sub-linear memory plan "
            "incurs roughly 30% of additional runtime cost compared to linear memory allocation. The general "
            "trend of speed vs workload remains linear for both strategies.\"* (§5.4: \"Because of the double "
            "forward cost in gradient calculation, the sublinear allocation strategy costs 30% additional "
            "runtime compared to the normal strategy.\")",
}
MEASURED_LABELS = [("sharing", "sharing"), ("drop_bn_relu", "drop bn-relu"), ("drop_cheap", "drop cheap"),
                   ("sublinear", "sublinear (Alg. 3)"), ("sublinear_sqrt", "sqrt(n) segments"),
                   ("sublinear_drop", "sublinear + drop")]
RECOMPUTING = ("drop_bn_relu", "drop_cheap", "sublinear", "sublinear_sqrt", "sublinear_drop")
STRATEGY_TEXT = dict(MEASURED_LABELS)


def _mb(v: float) -> str:
    v = v / 1e6
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _series(measured: dict | None, figure: str) -> list[dict]:
    """The measured points of ``figure`` at its most common size, by x (as the measured script plots)."""
    pts = (measured or {}).get(figure, [])
    if not pts:
        return []
    keys = [json.dumps(p["size"], sort_keys=True) for p in pts]
    common = max(set(keys), key=keys.count)
    x = "depth" if figure == "fig5" else "steps"
    return sorted((p for p, k in zip(pts, keys) if k == common), key=lambda p: p[x])


def _size_text(figure: str, size: dict) -> str:
    if figure == "fig5":
        return (f"bottleneck ResNet of base width {size['width']} (the paper's: 64), {size['image_size']}x"
                f"{size['image_size']} images, batch {size['batch']}")
    return (f"LSTM {size['layers']} layers x {size['hidden']} hidden, {size['in_features']} inputs, "
            f"{size['classes']} classes, batch {size['batch']}")


def _measured_memory(points: list[dict], figure: str, measured: dict) -> list[str]:
    x = "depth" if figure == "fig5" else "steps"
    labels = [(k, t) for k, t in MEASURED_LABELS if any(k in p["strategies"] for p in points)]
    runs = sorted({p["run"] for p in points})
    lines = [f"Measured on this machine's CPU ({_size_text(figure, points[0]['size'])}; "
             f"{measured['runs'][runs[-1]]['machine'].get('cpu_count')} cores, torch "
             f"{measured['runs'][runs[-1]]['machine'].get('torch')}, "
             f"{measured['runs'][runs[-1]].get('threads', '?')} thread). Peak activation memory in MB, "
             "**predicted / measured**: predicted = `remat.simulate` of the schedule the compiled executor runs, "
             "on the captured joint graph; measured = live storages of one real step (`remat.measure`, method "
             "\"tracker\"; parameters and their gradients excluded). Eager PyTorch: the plain model under autograd "
             "(measured only). Where the sharing plan was not run (compiling it takes minutes at the largest "
             "depth), its prediction is the vanilla peak of the same graph.",
             "", f"| {x} | params (M) | nodes | no optimization (pred) | eager PyTorch | "
             + " | ".join(t for _, t in labels) + " | sharing / sublinear, measured |",
             "|" + "---|" * (6 + len(labels))]
    for p in points:
        st = p["strategies"]
        vanilla = next((r["vanilla_predicted_peak"] for r in st.values() if "vanilla_predicted_peak" in r), None)
        cells = [f"{_mb(st[k]['predicted_peak'])} / {_mb(st[k]['measured_peak'])}" if k in st else
                 f"{_mb(vanilla)} / not run" if k == "sharing" and vanilla is not None else "-" for k, _ in labels]
        base = st.get("sharing", st["pytorch"])  # eager PyTorch where the sharing plan was not run
        ratio = (f"{base['measured_peak'] / st['sublinear']['measured_peak']:.1f}x"
                 + ("" if "sharing" in st else " (eager)") if "sublinear" in st else "-")
        lines.append(f"| {p[x]} | {p['params'] / 1e6:.1f} | {p.get('nodes', '-')} | "
                     f"{_mb(p['no_optimization_predicted']) if 'no_optimization_predicted' in p else '-'} | "
                     f"{_mb(st['pytorch']['measured_peak'])} | " + " | ".join(cells) + f" | {ratio} |")
    if len(points) > 1:
        a, b = points[0], points[-1]
        slopes = []
        for k, t in [("pytorch", "eager PyTorch")] + labels:
            if k in a["strategies"] and k in b["strategies"]:
                s = math.log(b["strategies"][k]["measured_peak"] / a["strategies"][k]["measured_peak"]) / \
                    math.log(b[x] / a[x])
                slopes.append(f"{t} {s:.2f}")
        lines += ["", f"Measured log-log slopes from {x} {a[x]} to {b[x]}: " + ", ".join(slopes)
                  + " (1 = linear, 0.5 = sqrt(n))."]
    ratios = {k: [p["strategies"][k]["measured_peak"] / p["strategies"][k]["predicted_peak"] for p in points
                  if k in p["strategies"]] for k, _ in labels}
    lines += ["", "Measured / predicted: " + ", ".join(f"{t} {min(ratios[k]):.3f}-{max(ratios[k]):.3f}"
                                                       for k, t in labels if ratios[k]) + "."]
    def excess(k: str) -> list[float]:  # measured - predicted, MB
        return [(p["strategies"][k]["measured_peak"] - p["strategies"][k]["predicted_peak"]) / 1e6
                for p in points if k in p["strategies"]]

    def span(v: list[float]) -> str:
        return f"{min(v):.2f}-{max(v):.2f}" if min(v) < 1 else f"{min(v):.1f}-{max(v):.1f}"

    recomputing = [k for k in RECOMPUTING if ratios.get(k)]
    if figure == "fig6" and ratios.get("sharing") and max(ratios["sharing"]) > 1.1:
        lines.append(f"The measured peaks sit above the predicted ones, sharing by {span(excess('sharing'))} MB, "
                     + ", ".join(f"{STRATEGY_TEXT[k]} by {span(excess(k))} MB" for k in recomputing)
                     + f", against {4 * points[0]['params'] / 1e6:.1f} MB of parameters: the backward sums each "
                     "weight's gradient over the time steps (one product per step added into a running sum: a "
                     "weight-sized buffer per weight matrix from the last step's backward to the first's; the "
                     "tracker leaves out only the storage that ends as `.grad`), and the planning graph has no "
                     "parameter nodes, so the simulator does not count those sums. They are real memory (MXNet "
                     "summed in place into one cell, §5.3); how much of them a peak holds depends on where in the "
                     "backward the peak falls, hence the spread. Being about the same for every plan, they flatten "
                     "the measured ratios against the predicted ones, most at short lengths.")
    elif recomputing and max(max(ratios[k]) for k in recomputing) > 1.1:
        lines.append("The plans that recompute measure above their prediction, by "
                     + ", ".join(f"{STRATEGY_TEXT[k]} {span(excess(k))} MB" for k in recomputing)
                     + ": the compiled executor (`remat/compiled/split.py`) derives the outputs of a recomputed "
                     "multi-output op lazily, so a recomputed batch norm's output tuple (output, mean, inverse std) "
                     "stays referenced, its output included, until the backward step that reads the mean, while the "
                     "simulator frees that output after its last reader. Checked with every output of a recomputed "
                     "op derived right after it (a 7-line change to `split.py`, applied since in commit 6b8ab4d, after these points were measured): ResNet-50's "
                     "plans then measure 1.000-1.057 times their prediction, and drop cheap at depth 302 exactly "
                     "its prediction (20.35 MB, against 24.52 MB measured above).")
    return lines


def _measured_time(fig5: list[dict], fig6: list[dict]) -> list[str]:
    plans = [(k, t) for k, t in MEASURED_LABELS if k != "sharing"
             and any(k in p["strategies"] for p in fig5 + fig6)]
    lines = ["Measured on the CPU, one thread: every method's step round-robin, the median over rounds of its "
             "time over the sharing plan's time in the same round; extra time in %, **measured (predicted)**, "
             "the prediction being the plan's recompute cost / (3 x forward) in FLOPs. Seconds: median step "
             "time of the sharing plan and of eager PyTorch.", "",
             "| network | eager PyTorch s | sharing s | " + " | ".join(t for _, t in plans) + " |",
             "|" + "---|" * (3 + len(plans))]
    for figure, points in (("fig5", fig5), ("fig6", fig6)):
        x = "depth" if figure == "fig5" else "steps"
        for p in points:
            st = p["strategies"]
            if "time_vs_sharing" not in st.get("sharing", {}):
                continue
            name = f"ResNet-{p[x]}" if figure == "fig5" else f"LSTM {p[x]} steps"
            cells = [f"{100 * (st[k]['time_vs_sharing'] - 1):+.0f} ({100 * st[k]['recompute_fraction'] / 3:.0f})"
                     if k in st else "-" for k, _ in plans]
            lines.append(f"| {name} | {st['pytorch']['step_seconds_median']:.3f} | "
                         f"{st['sharing']['step_seconds_median']:.3f} | " + " | ".join(cells) + " |")
    alone = []  # points timed without a sharing plan: against eager PyTorch
    for figure, points in (("fig5", fig5), ("fig6", fig6)):
        x = "depth" if figure == "fig5" else "steps"
        for p in points:
            st = p["strategies"]
            if "sharing" in st:
                continue
            name = f"ResNet-{p[x]}" if figure == "fig5" else f"LSTM {p[x]} steps"
            alone += [f"{name} {STRATEGY_TEXT.get(k, k)} {100 * (r['time_vs_pytorch'] - 1):+.0f}% over eager PyTorch "
                      f"({r['step_seconds_median']:.2f} s against {st['pytorch']['step_seconds_median']:.2f} s)"
                      for k, r in st.items() if k != "pytorch" and "time_vs_pytorch" in r]
    if alone:
        lines += ["", "Timed without a sharing plan: " + "; ".join(alone) + "."]
    lines += ["", "Each point is its own run: absolute seconds drift with the load of the shared machine from run to "
              "run (other jobs ran beside these); the ratios are taken within a run, round by round, and still "
              "scatter by about +-10 points from one depth to the next."]
    return lines


def readme(resnet: list[dict], lstm: list[dict], header: dict, measured: dict | None = None) -> str:
    """README.md of the results folder: each figure's paper text, our predicted figure and table, and
    (from ``measured``, the measured script's measured.json) the measured figure and table."""
    def gb(v: float) -> str:
        return f"{v / GB:.2f}"

    fig5m, fig6m = _series(measured, "fig5"), _series(measured, "fig6")
    lines = ["# Chen et al. 2016, Figures 5-7: predicted and measured", "",
             f"**Predicted** by `{header['command']}` on {header['date']}: the paper's settings, on "
             "`remat.zoo.graph` (one node per layer op, float32 bytes, FLOP costs); memory = peak of feature "
             "maps and gradients from `remat.simulate` (parameters excluded, as in the paper); time overhead = "
             "recompute cost / (forward + 2 x forward). See bench/bench_chen_figures.py for the strategies.", ""]
    if measured and (fig5m or fig6m):
        cmds = sorted({measured["runs"][p["run"]]["command"] for p in fig5m + fig6m})
        lines += ["**Measured** by bench/bench_chen_figures_measured.py (its docstring says how), real training "
                  "steps on this machine's CPU at sizes that fit it, each strategy's own plan run by remat's "
                  "compiled executor, peaks by live-storage tracking, times round-robin; measured.json has every "
                  "number, the allocator-level (profiler) peaks and each run's machine. Commands: "
                  + "; ".join(f"`{c}`" for c in cmds) + ".", "",
                  "Where ours departs from the paper: sizes (measured: "
                  + "; ".join(_size_text(f, pts[0]["size"]) for f, pts in (("fig5", fig5m), ("fig6", fig6m)) if pts)
                  + "; the paper: width 64, 224x224, batch 32, and 1024 hidden, 5000 classes, batch 64), the "
                  f"device (a shared {measured['runs'][-1]['machine'].get('cpu_count')}-core CPU, one thread, float32, "
                  "against a Titan X), the framework (PyTorch's "
                  "functionalized joint graph, where ReLU and batch norm are out of place; MXNet ran them in "
                  "place, so the paper's \"inplace\" line has no counterpart here and our sharing line sits "
                  "higher), the block (v1.5 post-activation bottleneck, the zoo's; the paper's nets were "
                  "pre-activation), and what is counted (activations and their gradients only; the paper's "
                  "runtime line, by nvidia-smi, also holds parameters and workspace). The predicted peak of each "
                  "measured point is the simulation of the very schedule that ran, on the same captured graph.", ""]

    lines += ["## Figure 5: ResNet, memory against depth", "", PAPER_TEXT["fig5"], "",
              "| predicted, paper's sizes | measured, CPU |", "|---|---|",
              "| ![predicted](fig5_resnet_memory.png) | "
              + ("![measured](fig5_resnet_memory_measured.png) |" if fig5m else "not measured |"), "",
              "### Predicted: batch 32, 224x224 (GB)", "",
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
            a, b = resnet[0], resnet[-1]
            slope = {k: math.log(b[k] / a[k]) / math.log(b["depth"] / a["depth"])
                     for k in ("sharing", "drop_bn_relu", "sublinear", "sublinear_drop")}
            lines.append("Log-log slopes from depth {} to {}: ".format(a["depth"], b["depth"])
                         + ", ".join(f"{k} {v:.2f}" for k, v in slope.items())
                         + " (1 = linear, 0.5 = sqrt(n)).")
    if fig5m:
        lines += ["", "### Measured (MB)", ""] + _measured_memory(fig5m, "fig5", measured)
    lines += ["", "## Figure 6: LSTM, memory against unrolled steps", "", PAPER_TEXT["fig6"], "",
              "| predicted, paper's sizes | measured, CPU |", "|---|---|",
              "| ![predicted](fig6_lstm_memory.png) | "
              + ("![measured](fig6_lstm_memory_measured.png) |" if fig6m else "not measured |"), "",
              "### Predicted: 4 layers x 1024 hidden, batch 64 (GB)", "",
              "| steps | nodes | no optimization | sharing | drop cheap | sublinear (Alg. 3) | sublinear + drop "
              "| recursive k=1 | sharing / sublinear |", "|---|---|---|---|---|---|---|---|---|"]
    for r in lstm:
        lines.append(f"| {r['steps']} | {r['nodes']} | {gb(r['no_optimization'])} | {gb(r['sharing'])} | "
                     f"{gb(r['drop_cheap'])} | {gb(r['sublinear'])} | {gb(r['sublinear_drop'])} | "
                     f"{gb(r['recursive'])} | {r['sharing'] / r['sublinear']:.1f}x |")
    lines += ["", f"Paper: {PAPER['fig6']}. The least any plan can reach here grows linearly with the steps: "
              "the backward step of the final `stack` of the per-step logits holds the stacked logits, their "
              "gradient and one gradient per step, three times all logits (3 x 64 steps x 64 x 5000 x 4 B = "
              "246 MB at 64 steps); the recursion's peak is that step."]
    if fig6m:
        lines += ["", "### Measured (MB)", ""] + _measured_memory(fig6m, "fig6", measured)
    lines += ["", "## Figure 7: time overhead", "", PAPER_TEXT["fig7"], "",
              "| predicted, paper's sizes | measured, CPU |", "|---|---|",
              "| ![predicted](fig7_time_overhead.png) | "
              + ("![measured](fig7_time_overhead_measured.png) |" if fig5m or fig6m else "not measured |"), "",
              "### Predicted (% of forward + backward)", "",
              "| network | drop bn-relu | drop cheap | sublinear | sublinear + drop | recursive k=1 |",
              "|---|---|---|---|---|---|"]
    plans = ("drop_bn_relu", "drop_cheap", "sublinear", "sublinear_drop", "recursive")
    for label, r in [(f"ResNet-{r['depth']}", r) for r in resnet] + [(f"LSTM {r['steps']} steps", r) for r in lstm]:
        lines.append(f"| {label} | " + " | ".join(f"{100 * r[k + '_overhead']:.1f}" for k in plans) + " |")
    lines += ["", f"Paper: {PAPER['fig7']}. A sublinear plan recomputes at most one forward pass, i.e. "
              "at most 33% of forward + backward when the backward costs twice the forward; the measured "
              "30% includes kernel speeds that FLOP counts do not see."]
    if fig5m or fig6m:
        lines += ["", "### Measured (% extra time over the sharing plan)", ""] + _measured_time(fig5m, fig6m)
    lines.append("")
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
    measured = out / "measured.json"  # bench_chen_figures_measured.py's points, if any
    (out / "README.md").write_text(readme(resnet, lstm, header,
                                          json.loads(measured.read_text()) if measured.exists() else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
