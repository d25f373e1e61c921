"""Seed 004 benchmarks: TWRemat speed and treewidths (Table 1), peak memory and schedule length
vs depth for NoRemat, GreedyRemat and TWRemat (Figures 2 and 3).

    .venv/bin/python bench/bench_twremat.py [--quick]

writes bench/results/twremat_speed.json, twremat_figures.json and twremat_figures.png.

The graphs: ``remat.zoo`` paper-network graph generators if present, else the private
generators below, written in the granularity of a TensorFlow training graph (seed 004 used
TF's official ResNet and Transformer): parameter reads (mem 0: parameters are always in memory),
batch norm as its primitive ops in training mode with its moving-average updates, L2 weight
decay per weight. Unit cost per op, as in seed 004 §4. Memory: float32 tensor bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

import remat  # noqa: E402
from remat.graph import Graph  # noqa: E402
from remat.joint import joint_graph  # noqa: E402
from remat.machine import machine_info

F32 = 4


class _Builder:
    """Adds ops with fresh ids; accumulates the weight-decay sum."""

    def __init__(self, name: str):
        self.g = Graph(name=name)
        self.n = 0
        self.decay: str | None = None

    def op(self, kind: str, mem: float, inputs: list[str]) -> str:
        self.n += 1
        node = f"{kind}{self.n}"
        self.g.add_node(node, mem, 1, inputs, op=kind)
        return node

    def param(self, shape_bytes: float) -> str:
        """A parameter read, plus its L2 weight-decay term added to the running sum."""
        w = self.op("read", 0, [])
        l2 = self.op("l2loss", F32, [w])
        self.decay = l2 if self.decay is None else self.op("add", F32, [self.decay, l2])
        return w

    def batchnorm(self, x: str, act: float, ch: int, relu: bool) -> str:
        vec = ch * F32
        gamma, beta, mmean, mvar = (self.op("read", 0, []) for _ in range(4))
        mean = self.op("mean", vec, [x])
        sg = self.op("stopgrad", vec, [mean])
        sq = self.op("sqdiff", act, [x, sg])
        var = self.op("mean", vec, [sq])
        rs = self.op("rsqrt", vec, [self.op("add", vec, [var])])
        scale = self.op("mul", vec, [rs, gamma])
        xs = self.op("mul", act, [x, scale])
        shift = self.op("sub", vec, [beta, self.op("mul", vec, [mean, scale])])
        out = self.op("add", act, [xs, shift])
        for moving, stat in ((mmean, mean), (mvar, var)):  # moving averages: side effects, sinks
            d = self.op("sub", vec, [moving, stat])
            self.op("assign_sub", vec, [moving, self.op("mul", vec, [d])])
        return self.op("relu", act, [out]) if relu else out


def resnet_graph(blocks: tuple[int, ...] = (3, 24, 36, 3), batch: int = 32, name: str = "resnet200") -> Graph:
    """Bottleneck ResNet for ImageNet (He et al.): ResNet200 is blocks (3, 24, 36, 3)."""
    b = _Builder(name)

    def unit(x: str, cin: int, cout: int, hw: int, k: int, relu: bool = True) -> str:
        w = b.param(cin * cout * k * k * F32)
        act = batch * cout * hw * hw * F32
        y = b.op("conv", act, [x, w])
        return b.batchnorm(y, act, cout, relu)

    x = b.op("input", batch * 3 * 224 * 224 * F32, [])
    x = unit(x, 3, 64, 112, 7)
    x = b.op("maxpool", batch * 64 * 56 * 56 * F32, [x])
    cin, hw = 64, 56
    for stage, nblocks in enumerate(blocks):
        width = 64 * 2 ** stage
        for i in range(nblocks):
            if i == 0 and stage > 0:
                hw //= 2
            cout = 4 * width
            h = unit(x, cin, width, hw, 1)
            h = unit(h, width, width, hw, 3)
            h = unit(h, width, cout, hw, 1, relu=False)
            short = unit(x, cin, cout, hw, 1, relu=False) if i == 0 else x
            act = batch * cout * hw * hw * F32
            x = b.op("relu", act, [b.op("add", act, [h, short])])
            cin = cout
    x = b.op("avgpool", batch * cin * F32, [x])
    logits = b.op("biasadd", batch * 1000 * F32, [b.op("matmul", batch * 1000 * F32, [x, b.param(0)]), b.param(0)])
    xent = b.op("xent", batch * F32, [logits, b.op("labels", batch * F32, [])])
    b.op("add", F32, [b.op("mean", F32, [xent]), b.decay])
    return b.g


def ffn_graph(layers: int = 100, width: int = 1024, batch: int = 256, name: str | None = None) -> Graph:
    """Feed-forward network with ReLU, mean squared error loss (seed 004 §4 (ii))."""
    b = _Builder(name or f"ffn{layers}")
    act = batch * width * F32
    x = b.op("input", act, [])
    for _ in range(layers):
        x = b.op("relu", act, [b.op("biasadd", act, [b.op("matmul", act, [x, b.param(0)]), b.param(0)])])
    y = b.op("biasadd", act, [b.op("matmul", act, [x, b.param(0)]), b.param(0)])
    sq = b.op("sqdiff", act, [y, b.op("labels", act, [])])
    b.op("add", F32, [b.op("mean", F32, [sq]), b.decay])
    return b.g


def transformer_graph(layers: int = 6, d: int = 512, heads: int = 8, ff: int = 2048, batch: int = 32,
                      length: int = 256, vocab: int = 32000, name: str = "transformer-base") -> Graph:
    """Transformer base (Vaswani et al.): 6+6 layers, d 512, 8 heads, ffn 2048, dropout."""
    b = _Builder(name)
    act, score = batch * length * d * F32, batch * heads * length * length * F32

    def layernorm(x: str) -> str:
        vec = batch * length * F32
        gamma, beta = b.op("read", 0, []), b.op("read", 0, [])
        mean = b.op("mean", vec, [x])
        var = b.op("mean", vec, [b.op("sqdiff", act, [x, mean])])
        rs = b.op("rsqrt", vec, [b.op("add", vec, [var])])
        y = b.op("mul", act, [b.op("sub", act, [x, mean]), rs])
        return b.op("add", act, [b.op("mul", act, [y, gamma]), beta])

    def proj(x: str, dout: int) -> str:
        return b.op("matmul", batch * length * dout * F32, [x, b.param(0)])

    def attention(x: str, memory: str) -> str:
        q = b.op("split_heads", act, [proj(x, d)])
        k = b.op("split_heads", act, [proj(memory, d)])
        v = b.op("split_heads", act, [proj(memory, d)])
        s = b.op("add", score, [b.op("scale", score, [b.op("matmul", score, [q, k])]), b.op("bias", score, [])])
        p = b.op("dropout", score, [b.op("softmax", score, [s])])
        o = b.op("combine_heads", act, [b.op("matmul", act, [p, v])])
        y = b.op("dropout", act, [proj(o, d)])
        return layernorm(b.op("add", act, [x, y]))

    def feedforward(x: str) -> str:
        h = b.op("dropout", batch * length * ff * F32,
                 [b.op("relu", batch * length * ff * F32, [b.op("biasadd", batch * length * ff * F32, [proj(x, ff), b.param(0)])])])
        y = b.op("dropout", act, [b.op("biasadd", act, [proj(h, d), b.param(0)])])
        return layernorm(b.op("add", act, [x, y]))

    emb = b.param(0)
    enc = b.op("dropout", act, [b.op("add", act, [b.op("gather", act, [emb]), b.op("posenc", act, [])])])
    for _ in range(layers):
        enc = feedforward(attention(enc, enc))
    dec = b.op("dropout", act, [b.op("add", act, [b.op("gather", act, [emb]), b.op("posenc", act, [])])])
    for _ in range(layers):
        dec = feedforward(attention(attention(dec, dec), enc))
    logits = b.op("matmul", batch * length * vocab * F32, [dec, emb])
    xent = b.op("xent", batch * length * F32, [logits, b.op("labels", batch * length * F32, [])])
    b.op("add", F32, [b.op("mean", F32, [xent]), b.decay])
    return b.g


# ---- measurements -------------------------------------------------------------------------------
GiB = 2 ** 30
SOLVERS = ("none", "greedy", "twremat")
TABLE1 = {"resnet200": (17705, 27312, 11), "ffn100": (3217, 4447, 6), "transformer-base": (15842, 21771, 18)}


def edges(g: Graph) -> int:
    return sum(len(g[v].inputs) for v in g.order)


def schedule_row(g: Graph) -> dict:
    """Seed 004 Figures 2/3 quantities on the joint graph: peak M(σ) and length per solver."""
    j, end = joint_graph(g)
    row: dict = {"graph": g.name, "n_forward": len(g), "n_joint": len(j)}
    for s in SOLVERS:
        plan = remat.solve(j, None, solver=s, problem="schedule", final=end)
        row[s] = {"peak_bytes": plan.peak, "peak_gib": plan.peak / GiB, "length": len(plan.schedule),
                  "solve_seconds": round(plan.solve_seconds, 3)}
        if s == "twremat":
            row["treewidth_joint"] = plan.stats["treewidth"]
    for s in SOLVERS:
        row[s]["relative_length"] = row[s]["length"] / row["none"]["length"]
    return row


def table1_row(g: Graph, source: str, repeats: int = 3) -> dict:
    """Graph size, treewidth, twremat solve time (median of ``repeats``), peaks."""
    from remat.solvers.twremat import decompose, undirected
    j, end = joint_graph(g)
    times, train_times = [], []
    for _ in range(repeats):
        plan = remat.solve(j, None, solver="twremat", problem="schedule", final=end)
        times.append(plan.solve_seconds)
        train = remat.solve(g, None, solver="twremat")
        train_times.append(train.solve_seconds)
    vanilla = remat.solve(g, None, solver="none")
    paper = TABLE1.get(g.name)
    return {
        "graph": g.name, "source": source, "n_forward": len(g), "m_forward": edges(g),
        "n_joint": len(j), "m_joint": edges(j),
        "treewidth_joint": plan.stats["treewidth"], "treewidth_forward": decompose(undirected(g)).width,
        "paper_table1": dict(zip(("n", "m", "tw"), paper)) if paper else None,
        "twremat_schedule_seconds": sorted(times)[len(times) // 2],
        "twremat_training_seconds": sorted(train_times)[len(train_times) // 2],
        "decompose_seconds": round(plan.stats["decompose_seconds"], 3),
        "schedule_length": len(plan.schedule), "relative_length": len(plan.schedule) / len(j),
        "bags": plan.stats["bags"], "recursion_depth": plan.stats["recursion_depth"],
        "schedule_peak_gib": plan.peak / GiB,
        "training_peak_gib": train.peak / GiB, "vanilla_training_peak_gib": vanilla.peak / GiB,
    }


def k_sweep(g: Graph) -> list[dict]:
    """Seed 004 Figure 4: TWRemat(k) memory vs length."""
    j, end = joint_graph(g)
    out, k = [], 1
    while True:
        plan = remat.solve(j, None, solver="twremat", problem="schedule", final=end, k=k)
        out.append({"k": k, "peak_gib": plan.peak / GiB, "length": len(plan.schedule)})
        if k > plan.stats["bags"]:
            return out
        k *= 2


def zoo_graph(name: str, **options) -> Graph | None:
    try:
        from remat import zoo
    except ImportError:
        return None
    g = zoo.graph(name, **options)
    g.name = f"{name}{options.get('depth', '')}"
    return g


RESNET_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3), 200: (3, 24, 36, 3)}


def figures(quick: bool) -> dict:
    resnet_depths = [50, 101] if quick else [50, 101, 152, 200]
    ffn_depths = [10, 25] if quick else [10, 25, 50, 100, 200]
    series: dict = {"tf_ops": {"resnet": [], "ffn": []}, "layers": {"resnet": [], "ffn": []}}
    for d in resnet_depths:
        series["tf_ops"]["resnet"].append({"depth": d, **schedule_row(resnet_graph(RESNET_BLOCKS[d], name=f"resnet{d}"))})
        g = zoo_graph("resnet", depth=d)
        if g is not None:
            series["layers"]["resnet"].append({"depth": d, **schedule_row(g)})
    for d in ffn_depths:
        series["tf_ops"]["ffn"].append({"depth": d, **schedule_row(ffn_graph(d))})
        g = zoo_graph("ffn", depth=d)
        if g is not None:
            series["layers"]["ffn"].append({"depth": d, **schedule_row(g)})
    return series


TABLE2 = {"transformer-base": {"none_gib": 3.97, "greedy_gib": 2.92, "greedy_rel_len": 1.21,
                               "twremat_gib": 1.14, "twremat_rel_len": 10.61},
          "transformer-big": {"none_gib": 13.25, "greedy_gib": 10.12, "greedy_rel_len": 1.27,
                              "twremat_gib": 2.89, "twremat_rel_len": 10.64}}


def table2(quick: bool) -> list[dict]:
    """Seed 004 Table 2: Transformer base and big, peak memory and relative length."""
    graphs = [("tf_ops", transformer_graph(layers=1 if quick else 6)),
              ("tf_ops", transformer_graph(layers=1 if quick else 6, d=1024, heads=16, ff=4096,
                                           name="transformer-big"))]
    if not quick:
        for size in ("base", "big"):
            g = zoo_graph("transformer", size=size)
            if g is not None:
                g.name = f"transformer-{size}"
                graphs.append(("layers", g))
    return [{"granularity": grain, **schedule_row(g), "paper_table2": TABLE2.get(g.name)} for grain, g in graphs]


def plot(series: dict, ksweep: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    grains = [gr for gr in series if any(series[gr].values())]
    fig, axes = plt.subplots(len(grains), 5, figsize=(22, 4.2 * len(grains)), squeeze=False)
    for r, grain in enumerate(grains):
        for c, (family, what, label) in enumerate([("resnet", "peak_gib", "peak memory (GiB)"),
                                                   ("ffn", "peak_gib", "peak memory (GiB)"),
                                                   ("resnet", "relative_length", "length / NoRemat"),
                                                   ("ffn", "relative_length", "length / NoRemat")]):
            ax = axes[r][c]
            rows = series[grain][family]
            for s in SOLVERS:
                ax.plot([x["depth"] for x in rows], [x[s][what] for x in rows], "o-", label=s)
            ax.set_xlabel("depth (layers)")
            ax.set_ylabel(label)
            ax.set_title(f"{family}, {grain} graphs")
            ax.legend()
        ax = axes[r][4]
        if r == 0:
            ax.plot([p["length"] for p in ksweep], [p["peak_gib"] for p in ksweep], "o-")
            for p in ksweep:
                ax.annotate(str(p["k"]), (p["length"], p["peak_gib"]), fontsize=7)
            ax.set_xlabel("schedule length")
            ax.set_ylabel("peak memory (GiB)")
            ax.set_title("TWRemat(k), resnet200 tf_ops (Fig. 4)")
        else:
            ax.axis("off")
    fig.suptitle("seed 004 Figures 2-4: NoRemat, GreedyRemat (limit 0), TWRemat on joint training graphs")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small graphs only (a smoke run)")
    ap.add_argument("--out", default=str(RESULTS), help="results folder")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join([Path(sys.executable).name, *sys.argv]) if argv is None else f"main({argv!r})"
    common = {"command": command, "machine": machine_info(),
              "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    if args.quick:
        private = [(ffn_graph(10), "private tf_ops"), (resnet_graph((1, 1, 1, 1), name="resnet-tiny"), "private tf_ops")]
    else:
        private = [(resnet_graph(), "private tf_ops"), (ffn_graph(100), "private tf_ops"),
                   (transformer_graph(), "private tf_ops"),
                   (resnet_graph((3, 40, 64, 3), name="resnet332"), "private tf_ops, depth scaled to a ~17.7k-node joint graph")]
        for name, opts, label in [("resnet", {"depth": 200}, "resnet200"), ("ffn", {"depth": 100}, "ffn100"),
                                  ("transformer", {"size": "base"}, "transformer-base")]:
            g = zoo_graph(name, **opts)
            if g is not None:
                g.name = label
                private.append((g, "remat.zoo layer graph"))
    rows = []
    for g, source in private:
        rows.append(table1_row(g, source, repeats=1 if args.quick else 3))
        print(json.dumps(rows[-1]), flush=True)
    note = ("wall-clock seconds of remat.solve in one process on 2 CPU cores shared with other jobs; "
            "schedule = the schedule problem on the joint graph, training = joint graph + conversion + "
            "simulation; treewidth = width of our min fill-in decomposition")
    (out / "twremat_speed.json").write_text(json.dumps(
        {**common, "speed_limit_seconds": 30, "note": note, "graphs": rows}, indent=1))

    series = figures(args.quick)
    ksweep = k_sweep(resnet_graph((1, 1, 1, 1)) if args.quick else resnet_graph())
    (out / "twremat_figures.json").write_text(json.dumps(
        {**common, "greedy_limit": 0, "cost": "unit per op (seed 004 §4)", "figures_2_3": series,
         "figure_4_k_sweep_resnet200": ksweep, "table_2": table2(args.quick)}, indent=1))
    plot(series, ksweep, out / "twremat_figures.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
