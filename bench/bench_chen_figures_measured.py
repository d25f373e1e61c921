"""Chen et al. 2016 (seed 002) Figures 5, 6 and 7, MEASURED: real training steps on this CPU.

    .venv/bin/python bench/bench_chen_figures_measured.py --figure fig5 --depths 50,101,152
    .venv/bin/python bench/bench_chen_figures_measured.py --figure fig6 --steps 8,16,32
    .venv/bin/python bench/bench_chen_figures_measured.py --report        # PNGs + README only
    .venv/bin/python bench/bench_chen_figures_measured.py --quick --out /tmp/chen   # smoke run

Each run measures the points it is given and merges them into OUT/measured.json (a point of the
same figure, x and model size is replaced), then redraws OUT/fig{5,6,7}_*_measured.png and
rewrites OUT/README.md with ``bench_chen_figures.readme`` (the predicted figures of
results.json and the measured ones side by side). So a sweep can be run a few points at a time.

Models, at sizes that fit this CPU (the paper's are in brackets):

- Figure 5: bottleneck ResNets of growing depth, ``remat.zoo``'s ResNet (v1.5 bottleneck,
  ``zoo.classification.resnet_layers``: the published tables for 50/101/152/200, else blocks
  spread evenly over the four stages, seed 002 §5.2 "increasing the depth of each residual
  stage") with the base width cut from 64 to 16 (a quarter of the channels, 1/16 of the
  parameters), 64x64 images, batch 4 [width 64, 224x224, batch 32]; ``--size '{"batch": 8}'``
  changes any of these;
- Figure 6: ``remat.zoo``'s LSTM (seed 002 §5.3: 4 layers, input 50, a softmax layer per step),
  hidden 128, 625 classes (the paper's classes/hidden ratio), batch 16, unrolled over
  ``--steps`` [1024 hidden, 5000 classes, batch 64, 64 steps]. The batch is large for the
  hidden size on purpose: the backward sums each weight's gradient over the steps in a
  weight-sized buffer that the planning graph does not model (it has no parameter nodes); at
  batch / hidden = 1/8 (the paper's: 1/16) the activations at 64 steps outweigh those buffers
  about tenfold, as in the paper's setting.

Strategies (seed 002 §5.1), each a real step run by remat's compiled executor
(``remat.compiled``: AOTAutograd's joint graph, split by the plan into a forward that saves the
kept values and a backward that recomputes the rest):

- ``pytorch``: the plain model, eager autograd (PyTorch frees what autograd does not save);
- ``sharing`` (``solver="none"``): nothing recomputed, every buffer freed after its last read;
- ``drop_bn_relu``: §4.2 by op name (``chen-drop-cheap``, threshold 0, unbounded chains; Fig. 5);
- ``drop_cheap``: ``chen-drop-cheap``'s default rule search (Fig. 5);
- ``sublinear``: Alg. 3 with the grid search over B (``chen-greedy``);
- ``sublinear_sqrt``: sqrt(n) segments (``chen-sqrt``; only with ``--strategies``);
- ``sublinear_drop``: Alg. 3 segments with cheap results dropped (``chen-drop-cheap-greedy``).

Each solver runs its own plan, ``remat.solve(graph, None, solver=...)`` on the captured joint
graph, as bench_chen_figures.py does on the abstract graphs: ``SolverPlanner`` is
``remat.compiled.partitioner.Planner`` with the budget search (``optimize.plan_within``)
replaced by that one call (``remat.optimize`` wants a budget and chooses the cheapest plan
within it, which is not the plan the paper's figure shows). The prediction of each point is
``remat.simulate`` of the schedule the executor runs (``Planned.prediction``), on the same graph.

Measured: peak activation memory by live-storage tracking (``remat.measure``, method
"tracker": op-level, the simulator's granularity, parameter gradients excluded) and, unless
``--no-profiler``, by replaying the CPU allocator's events (method "profiler": intra-op
temporaries included); step time: every method's step taken round-robin (``interleave``),
``--repeats`` rounds after one warm-up round, ratio = median over rounds of t / t_reference in the
same round (``time_ratios``), against ``sharing`` (the paper's Figure 7 compares the sublinear
plan with the sharing plan) and against ``pytorch``. ``--threads`` (default 1) fixes torch's
intra-op threads: this machine is shared, one thread keeps the rounds comparable.

Cost: compiling (AOTAutograd's trace, then planning) takes about as long per plan as a few
hundred steps, growing with the graph: on this 2-core machine under load a ResNet-302 point (5
plans) took 255 s of CPU, ResNet-500 with 3 plans 300 s, ResNet-1001 with the sublinear plan
alone 260 s, the 64-step LSTM (3 plans) 300 s; bench/results/chen_figures/README.md lists the
commands that made the stored results.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import remat  # noqa: E402
from remat import zoo  # noqa: E402
from remat.bench.steps import interleave, measured_peak, time_ratios, train_step  # noqa: E402
from remat.compiled.jointgraph import build  # noqa: E402
from remat.compiled.module import CompiledModule  # noqa: E402
from remat.compiled.partitioner import Planned, Planner  # noqa: E402
from remat.explain import held_across  # noqa: E402
from remat.compiled.split import split  # noqa: E402
from remat.machine import provenance  # noqa: E402
from remat.runtime import _executed  # noqa: E402
from remat.zoo.classification import Bottleneck, ResNet, resnet_layers  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "chen_figures"
MB = 1e6

# label -> (solver, options); the plans of bench_chen_figures.strategies
STRATEGIES: dict[str, tuple[str, dict[str, Any]]] = {
    "sharing": ("none", {}),
    "drop_bn_relu": ("chen-drop-cheap", {"threshold": 0.0, "max_chain": None}),
    "drop_cheap": ("chen-drop-cheap", {}),
    "sublinear": ("chen-greedy", {}),
    "sublinear_sqrt": ("chen-sqrt", {}),
    "sublinear_drop": ("chen-drop-cheap-greedy", {}),
}
DEFAULT = {"fig5": ("sharing", "drop_bn_relu", "drop_cheap", "sublinear", "sublinear_drop"),
           "fig6": ("sharing", "sublinear", "sublinear_drop")}
SIZES = {"fig5": {"width": 16, "image_size": 64, "batch": 4},
         "fig6": {"hidden": 128, "classes": 625, "batch": 16, "in_features": 50, "layers": 4}}
QUICK = {"fig5": ({"width": 4, "image_size": 32, "batch": 2}, (14, 26)),
         "fig6": ({"hidden": 16, "classes": 20, "batch": 2, "in_features": 8, "layers": 4}, (4, 8))}
X = {"fig5": "depth", "fig6": "steps"}


def log(msg: str) -> None:
    print(msg, flush=True)


# ---- models ----------------------------------------------------------------------------------


class NarrowResNet(ResNet):
    """``zoo``'s bottleneck ResNet of ``depth`` layers with base width ``width`` (64: the zoo's).

    Stages of ``width``, 2, 4 and 8 x ``width`` planes (x4 at each block's output), the blocks per
    stage of ``resnet_layers(depth)``; the stem is the 7x7 stride-2 convolution and max pooling.
    """

    def __init__(self, depth: int, width: int = 16, num_classes: int = 1000) -> None:
        nn.Module.__init__(self)
        self.preact = False
        self.inplanes = width
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        blocks = resnet_layers(depth)
        self.layer1 = self._make_layer(Bottleneck, width, blocks[0], 1, 1)
        self.layer2 = self._make_layer(Bottleneck, 2 * width, blocks[1], 2, 1)
        self.layer3 = self._make_layer(Bottleneck, 4 * width, blocks[2], 2, 1)
        self.layer4 = self._make_layer(Bottleneck, 8 * width, blocks[3], 2, 1)
        self.final = None
        self.num_classes = num_classes
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * width * Bottleneck.expansion, num_classes)


def build_model(figure: str, x: int, size: dict[str, int], seed: int = 0) -> tuple[nn.Module, tuple]:
    """The network of ``figure`` at depth / steps ``x`` and ``size``, with example inputs."""
    gen = torch.Generator().manual_seed(seed)
    if figure == "fig5":
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = NarrowResNet(x, size["width"])
        return model.train(), (torch.randn(size["batch"], 3, size["image_size"], size["image_size"], generator=gen),)
    if figure == "fig6":
        return zoo.build("lstm", batch=size["batch"], steps=x, hidden=size["hidden"], layers=size["layers"],
                         classes=size["classes"], in_features=size["in_features"], seed=seed)
    raise ValueError(f"unknown figure {figure!r}: fig5 or fig6")


# ---- a named solver's own plan through the compiled executor ----------------------------------


class SolverPlanner(Planner):
    """``Planner`` that runs ``remat.solve(graph, None, solver=..., **options)``: the solver's own
    plan (Chen's grid choice, the drop rule of least peak), no budget search."""

    def __init__(self, solver: str, options: dict[str, Any] | None = None, name: str = "model") -> None:
        super().__init__(None, solver, name=name)
        self.options = dict(options or {})

    def __call__(self, gm: Any, joint_inputs: Any, *, num_fwd_outputs: int, **_: Any) -> tuple[Any, Any]:
        from remat.optimize import vanilla_peak

        started = time.perf_counter()
        jg = build(gm, num_fwd_outputs, cost=self.cost, name=self.name, device=self.device)
        graph = jg.graph
        graph.pinned = getattr(jg, "pinned", jg.random)  # what Planner pins (random draws, their states)
        plan = remat.solve(graph, None, solver=self.solver, **self.options)
        steps, prediction = _executed(graph, plan)
        sp = split(jg, steps)
        self.planned.append(Planned(joint=jg, plan=plan, steps=steps, prediction=prediction,
                                    vanilla=vanilla_peak(graph), budget=prediction.peak, split=sp,
                                    seconds=time.perf_counter() - started,
                                    kept_bytes=sum(graph[v].mem for v in held_across(graph, steps))))
        return sp.forward, sp.backward


def compiled(model: nn.Module, inputs: tuple, solver: str, options: dict[str, Any]) -> CompiledModule:
    """``model``'s training step compiled with ``solver``'s own plan (``module.step.planned``)."""
    module = CompiledModule(model, lambda: SolverPlanner(solver, options))
    module.compile_for(inputs, {}, SolverPlanner(solver, options))
    return module


# ---- one point: every strategy on one model ---------------------------------------------------


def measure_point(figure: str, x: int, size: dict[str, int], strategies: tuple[str, ...], repeats: int = 5,
                  profiler: bool = True, progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Build the model, plan and compile each strategy, measure peaks, time all round-robin."""
    started = time.perf_counter()
    model, inputs = build_model(figure, x, size)
    point: dict[str, Any] = {X[figure]: x, "size": dict(size), "params": zoo.count_parameters(model),
                             "strategies": {}}
    rows: dict[str, dict[str, Any]] = {"pytorch": {"solver": "eager PyTorch"}}
    modules: dict[str, nn.Module] = {"pytorch": model}
    for label in strategies:
        solver, options = STRATEGIES[label]
        progress(f"{figure} {X[figure]}={x}: compile {label} ({solver})")
        t0 = time.perf_counter()
        module = compiled(model, inputs, solver, options)
        planned = module.step.planned
        s = planned.summary()
        g = planned.joint.graph
        rows[label] = {"solver": solver, "options": options, "chosen": s["chosen"],
                       "predicted_peak": s["predicted_peak"], "recompute_fraction": s["recompute_fraction"],
                       "vanilla_predicted_peak": s["vanilla_predicted_peak"],
                       "kept_bytes": s["kept_bytes"], "saved_values": s["saved_values"],
                       "recomputed_ops": s["recomputed_ops"], "unplanned_ops": s["unplanned_ops"],
                       "planning_seconds": round(s["planning_seconds"], 2),
                       "compile_seconds": round(time.perf_counter() - t0, 2)}
        if label == "sharing" or "nodes" not in point:
            point["nodes"] = len(g)
            point["no_optimization_predicted"] = g.total_mem() + sum(g[v].grad_size for v in g.order
                                                                    if g[v].requires_grad)
        modules[label] = module
    for name, module in modules.items():
        progress(f"{figure} {X[figure]}={x}: peak of {name}")
        rows[name]["measured_peak"] = measured_peak(remat.measure, module, inputs, zoo.loss, "tracker")
        if profiler:
            rows[name]["profiler_peak"] = measured_peak(remat.measure, module, inputs, zoo.loss, "profiler")
    for r in rows.values():
        if "predicted_peak" in r:
            r["measured_over_predicted"] = r["measured_peak"] / r["predicted_peak"]
    if repeats:
        progress(f"{figure} {X[figure]}={x}: timing {len(modules)} steps round-robin, {repeats} rounds")
        steps = {name: train_step(m, inputs, zoo.loss) for name, m in modules.items()}
        times = interleave(steps, repeats=repeats, warmup=1)
        vs_pytorch = time_ratios(times, "pytorch")
        vs_sharing = time_ratios(times, "sharing") if "sharing" in times else {}
        for name, r in rows.items():
            ts = sorted(times[name])
            r["step_seconds_median"] = ts[len(ts) // 2]
            r["time_vs_pytorch"] = vs_pytorch[name]
            if vs_sharing:
                r["time_vs_sharing"] = vs_sharing[name]
    point["strategies"] = rows
    point["seconds"] = round(time.perf_counter() - started, 1)
    return point


# ---- results file ------------------------------------------------------------------------------


def load(out: Path) -> dict[str, Any]:
    path = out / "measured.json"
    if path.exists():
        return json.loads(path.read_text())
    return {"description": "Chen et al. 2016 Figures 5-7 measured on this machine's CPU "
                           "(bench/bench_chen_figures_measured.py; see its docstring)",
            "units": "bytes; seconds; ratios are medians over round-robin rounds", "runs": [],
            "fig5": [], "fig6": []}


def merge(data: dict[str, Any], figure: str, point: dict[str, Any], run: int) -> None:
    """Add ``point`` (from run number ``run``), replacing one of the same x and size."""
    x = X[figure]
    point["run"] = run
    data[figure] = [p for p in data[figure] if not (p[x] == point[x] and p["size"] == point["size"])] + [point]
    data[figure].sort(key=lambda p: (json.dumps(p["size"], sort_keys=True), p[x]))


def series(data: dict[str, Any], figure: str) -> list[dict[str, Any]]:
    """The points of ``figure`` at its most common size (a sweep is one size), by x."""
    pts = data.get(figure, [])
    if not pts:
        return []
    keys = [json.dumps(p["size"], sort_keys=True) for p in pts]
    common = max(set(keys), key=keys.count)
    return sorted((p for p, k in zip(pts, keys) if k == common), key=lambda p: p[X[figure]])


# ---- figures -----------------------------------------------------------------------------------

STYLE = {"pytorch": ("eager PyTorch", "k", "s"), "sharing": ("sharing (no recompute)", "C0", "o"),
         "drop_bn_relu": ("drop bn-relu (§4.2)", "C1", "^"), "drop_cheap": ("drop cheap", "C2", "v"),
         "sublinear": ("sublinear (Alg. 3)", "C3", "D"), "sublinear_sqrt": ("sqrt(n) segments", "C5", "x"),
         "sublinear_drop": ("sublinear + drop cheap", "C4", "P")}


def _labels(points: list[dict[str, Any]]) -> list[str]:
    return [k for k in STYLE if any(k in p["strategies"] for p in points)]


def describe(figure: str, size: dict[str, Any]) -> str:
    if figure == "fig5":
        return f"ResNet width {size['width']}, {size['image_size']}x{size['image_size']}, batch {size['batch']}"
    return (f"LSTM {size['layers']} x {size['hidden']}, {size['classes']} classes, "
            f"batch {size['batch']}")


def _ticks(ax: Any, xs: list[int]) -> None:
    """Plain numbers at the measured x values on a log axis."""
    from matplotlib.ticker import NullFormatter

    if xs:
        ax.set_xticks(xs, [str(v) for v in xs])
        ax.xaxis.set_minor_formatter(NullFormatter())


def _vanilla(point: dict[str, Any]) -> float | None:
    """The predicted peak of the plan that recomputes nothing (the same for every plan's graph)."""
    st = point["strategies"]
    if "sharing" in st:
        return st["sharing"]["predicted_peak"]
    return next((r["vanilla_predicted_peak"] for r in st.values() if "vanilla_predicted_peak" in r), None)


def plot_memory(points: list[dict[str, Any]], figure: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = X[figure]
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    for key in _labels(points):
        label, color, marker = STYLE[key]
        pts = [p for p in points if key in p["strategies"]]
        xs = [p[x] for p in pts]
        ax.plot(xs, [p["strategies"][key]["measured_peak"] / MB for p in pts], marker=marker, color=color,
                ls="-", label=f"{label}, measured")
        if key == "sharing":  # where the sharing plan was not run, its prediction: the graph's vanilla peak
            pts = [p for p in points if _vanilla(p) is not None]
            ax.plot([p[x] for p in pts], [_vanilla(p) / MB for p in pts], marker=marker, color=color, ls=":",
                    mfc="none", alpha=.8, label=f"{label}, predicted")
        elif key != "pytorch":
            ax.plot(xs, [p["strategies"][key]["predicted_peak"] / MB for p in pts], marker=marker, color=color,
                    ls=":", mfc="none", alpha=.8, label=f"{label}, predicted")
    if points and "no_optimization_predicted" in points[0]:
        ax.plot([p[x] for p in points], [p["no_optimization_predicted"] / MB for p in points], color="grey",
                ls="--", label="no optimization, predicted")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _ticks(ax, [p[x] for p in points])
    name = "Fig. 5" if figure == "fig5" else "Fig. 6"
    ax.set(xlabel="ResNet depth (layers)" if figure == "fig5" else "LSTM unrolled steps",
           ylabel="peak activation memory (MB)",
           title=f"{name} MEASURED on CPU: {describe(figure, points[0]['size']) if points else ''}")
    ax.title.set_fontsize(9)
    ax.grid(alpha=.3, which="both")
    ax.legend(fontsize=6.5, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_time(fig5: list[dict[str, Any]], fig6: list[dict[str, Any]], path: Path) -> None:
    """Fig. 7: seconds per step (top) and the extra time of each plan over the sharing plan (bottom,
    measured and predicted); over eager PyTorch where no sharing plan was timed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for col, (figure, points) in enumerate((("fig5", fig5), ("fig6", fig6))):
        x = X[figure]
        top, bottom = axes[0][col], axes[1][col]
        if not points:
            for ax in (top, bottom):
                ax.text(0.5, 0.5, f"{figure}: not measured", ha="center", transform=ax.transAxes)
            continue
        ref = "sharing" if any("time_vs_sharing" in p["strategies"].get("sharing", {}) for p in points) else "pytorch"
        for key in _labels(points):
            label, color, marker = STYLE[key]
            pts = [p for p in points if "step_seconds_median" in p["strategies"].get(key, {})]
            top.plot([p[x] for p in pts], [p["strategies"][key]["step_seconds_median"] for p in pts], marker=marker,
                     color=color, label=label)
            if key in ("pytorch", "sharing"):
                continue
            pts = [p for p in pts if f"time_vs_{ref}" in p["strategies"][key]]
            bottom.plot([p[x] for p in pts], [100 * (p["strategies"][key][f"time_vs_{ref}"] - 1) for p in pts],
                        marker=marker, color=color, label=f"{label}, measured")
            bottom.plot([p[x] for p in pts], [100 * p["strategies"][key]["recompute_fraction"] / 3 for p in pts],
                        marker=marker, color=color, ls=":", mfc="none", label=f"{label}, predicted (FLOPs)")
        bottom.axhline(30, color="grey", ls="--", lw=1, label="paper: ~30% (Titan X)")
        bottom.set_ylim(bottom=min(0.0, bottom.get_ylim()[0]))
        xlabel = "ResNet depth (layers)" if figure == "fig5" else "LSTM unrolled steps"
        reference = "the sharing plan" if ref == "sharing" else "eager PyTorch"
        top.set(xscale="log", yscale="log", xlabel=xlabel, ylabel="seconds per step (median)",
                title=f"Fig. 7 MEASURED on CPU: {describe(figure, points[0]['size'])}")
        bottom.set(xscale="log", xlabel=xlabel, ylabel=f"extra time over {reference} (%)",
                   title=f"time overhead over {reference} (round-robin, median of per-round ratios)")
        top.title.set_fontsize(9)
        bottom.title.set_fontsize(9)
        for ax in (top, bottom):
            _ticks(ax, [p[x] for p in points])
            ax.grid(alpha=.3, which="both")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6.5)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def report(out: Path, data: dict[str, Any]) -> None:
    """PNGs of the measured figures and README.md (predicted and measured, by the predicted script)."""
    fig5, fig6 = series(data, "fig5"), series(data, "fig6")
    if fig5:
        plot_memory(fig5, "fig5", out / "fig5_resnet_memory_measured.png")
    if fig6:
        plot_memory(fig6, "fig6", out / "fig6_lstm_memory_measured.png")
    if fig5 or fig6:
        plot_time(fig5, fig6, out / "fig7_time_overhead_measured.png")
    predicted = out / "results.json"
    if predicted.exists():
        sys.path.insert(0, str(ROOT / "bench"))
        import bench_chen_figures as chen

        pred = json.loads(predicted.read_text())
        (out / "README.md").write_text(chen.readme(pred["fig5_resnet"], pred["fig6_lstm"], pred, data))


# ---- command line ------------------------------------------------------------------------------


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figure", choices=("fig5", "fig6"), help="which figure's points to measure")
    ap.add_argument("--depths", type=ints, default=(50,), help="fig5: ResNet depths, comma-separated")
    ap.add_argument("--steps", type=ints, default=(16,), help="fig6: LSTM unrolled steps, comma-separated")
    ap.add_argument("--strategies", default=None, help="comma-separated labels (default: the figure's)")
    ap.add_argument("--size", default=None, help='JSON overriding the model size, e.g. \'{"batch": 2}\'')
    ap.add_argument("--repeats", type=int, default=11, help="timed round-robin rounds (0: no timing)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--no-profiler", action="store_true", help="skip the allocator-level (profiler) peak")
    ap.add_argument("--quick", action="store_true", help="tiny models, both figures (a smoke run)")
    ap.add_argument("--report", action="store_true", help="only redraw the PNGs and README from measured.json")
    ap.add_argument("--out", default=str(RESULTS), help="results folder")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = load(out)
    if not args.report:
        if not args.quick and args.figure is None:
            ap.error("give --figure fig5|fig6 (or --quick, or --report)")
        torch.set_num_threads(args.threads)
        # AOTAutograd compiles generated Python source whose expressions nest about as deep as the model has
        # parameters; a 1001-layer ResNet (3000+ of them) exceeds the compiler's default nesting limit
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
        header = provenance(["bench/bench_chen_figures_measured.py", *(sys.argv[1:] if argv is None else argv)])
        header.update(threads=args.threads, repeats=args.repeats)
        data["runs"].append(header)
        run = len(data["runs"]) - 1
        jobs: list[tuple[str, dict[str, int], tuple[int, ...]]] = []
        if args.quick:
            jobs = [(f, dict(QUICK[f][0]), QUICK[f][1]) for f in ("fig5", "fig6")]
        else:
            size = {**SIZES[args.figure], **(json.loads(args.size) if args.size else {})}
            jobs = [(args.figure, size, args.depths if args.figure == "fig5" else args.steps)]
        for figure, size, xs in jobs:
            strategies = tuple(args.strategies.split(",")) if args.strategies else DEFAULT[figure]
            for x in xs:
                point = measure_point(figure, x, size, strategies, repeats=args.repeats,
                                      profiler=not args.no_profiler)
                merge(data, figure, point, run)
                (out / "measured.json").write_text(json.dumps(data, indent=1))
                log(summary_line(figure, point))
    report(out, data)
    return 0


def summary_line(figure: str, point: dict[str, Any]) -> str:
    parts = []
    for name, r in point["strategies"].items():
        pred = f" pred {r['predicted_peak'] / MB:.2f}" if "predicted_peak" in r else ""
        t = f" t x{r['time_vs_sharing']:.2f}" if "time_vs_sharing" in r else ""
        parts.append(f"{name}: {r['measured_peak'] / MB:.2f} MB{pred}{t}")
    return f"{figure} {X[figure]}={point[X[figure]]} ({point['seconds']} s): " + "; ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
