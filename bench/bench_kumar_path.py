"""kumar-path (seed 004 §5, path decomposition) against TWRemat (§3, tree decomposition).

    .venv/bin/python bench/bench_kumar_path.py [--quick]

writes bench/results/kumar_path.json and kumar_path.md.

Graphs (forward graphs; both solvers schedule their joint forward+backward graph):

- chains x1 -> ... -> xn, unit memory and cost (their joint graphs are ladders);
- ladders: two chains a_i -> a_{i+1}, b_i -> b_{i+1} with rungs a_i -> b_i (a 2-layer RNN);
- U-Net-like skip families of depth d: two convolutions per level, pooling halves the size, the
  decoder concatenates each level's skip, sizes 2^(d - level);
- seed 004 Table 1's networks in TensorFlow-op granularity (``bench_twremat``'s generators:
  ResNet200, FFN with 100 layers, Transformer base), unit cost per op as in seed 004 §4.

For each: the schedule problem on the joint graph (seed 004 §2: M(σ), and length L(σ) relative to
NoRemat's T_onepass) for NoRemat, TWRemat, kumar-path and kumar-path with ``balance=1`` (the
sketch's separator X_c taken always); the training problem (``remat.simulate``: peak, recompute
cost); and for the Table 1 graphs the cut-off trade-off (k = 1, 2, 4, ...: peak vs length).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import remat
from remat.graph import Graph
from remat.joint import joint_graph
from remat.machine import provenance

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SOLVERS = {"none": {}, "twremat": {}, "kumar-path": {}, "kumar-path balance=1": {"balance": 1.0}}
SKETCH_LIMIT = 2000  # joint nodes: beyond, balance=1 is slow (Transformer: 126 s, 5700x NoRemat) or runs out of memory (ResNet200)


def _load_twremat_bench():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_twremat", ROOT / "bench" / "bench_twremat.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- graph families --------------------------------------------------------------------------------
def ladder(n: int) -> Graph:
    """Two unit chains a, b of length n with rungs a_i -> b_i, and a loss reading b_n."""
    g = Graph(name=f"ladder{n}")
    for i in range(1, n + 1):
        g.add_node(f"a{i}", 1, 1, [f"a{i-1}"] if i > 1 else [])
        g.add_node(f"b{i}", 1, 1, [f"a{i}", *([f"b{i-1}"] if i > 1 else [])])
    g.add_node("loss", 1, 1, [f"b{n}"])
    return g


def unet(depth: int, convs: int = 2) -> Graph:
    """U-Net-like: per level ``convs`` convolutions, a pool to the next level, and on the way up an
    upsample, a concatenation with the level's skip, ``convs`` convolutions. Size 2^(depth - l)."""
    g = Graph(name=f"unet{depth}")
    size = lambda l: 2.0 ** (depth - l)  # noqa: E731
    prev: list[str] = []
    skips = []
    for l in range(depth):
        for c in range(convs):
            g.add_node(f"e{l}_{c}", size(l), 1, prev)
            prev = [f"e{l}_{c}"]
        skips.append(prev[0])
        g.add_node(f"p{l}", size(l + 1), 1, prev)
        prev = [f"p{l}"]
    for c in range(convs):
        g.add_node(f"m_{c}", size(depth), 1, prev)
        prev = [f"m_{c}"]
    for l in reversed(range(depth)):
        g.add_node(f"u{l}", size(l), 1, prev)
        g.add_node(f"cat{l}", 2 * size(l), 1, [f"u{l}", skips[l]])
        prev = [f"cat{l}"]
        for c in range(convs):
            g.add_node(f"d{l}_{c}", size(l), 1, prev)
            prev = [f"d{l}_{c}"]
    g.add_node("loss", 1, 1, prev)
    return g


# ---- measurements -------------------------------------------------------------------------------------
def compare(g: Graph, family: str) -> dict:
    """Schedule problem on the joint graph and training problem, per solver."""
    j, end = joint_graph(g)
    one_pass = j.total_cost()
    row: dict = {"graph": g.name, "family": family, "n_forward": len(g), "n_joint": len(j),
                 "schedule": {}, "training": {}}
    for label, opts in SOLVERS.items():
        solver = label.split()[0]
        if "balance" in opts and len(j) > SKETCH_LIMIT:
            continue
        started = time.perf_counter()
        plan = remat.solve(j, None, solver=solver, problem="schedule", final=end, **opts)
        seconds = time.perf_counter() - started
        entry = {"peak": plan.peak, "length": plan.stats["length"], "relative_length": plan.stats["length"] / one_pass,
                 "seconds": round(seconds, 3)}
        for key in ("treewidth", "pathwidth", "layout", "recursion_depth", "bags", "separators_from_last_node"):
            if key in plan.stats:
                entry[key] = plan.stats[key]
        row["schedule"][label] = entry
        if label in ("none", "twremat", "kumar-path"):
            train = remat.solve(g, None, solver=solver)
            sim = remat.simulate(g, train)
            row["training"][label] = {"peak": sim.peak, "recompute_cost": sim.recompute_cost,
                                      "recompute_per_forward": sim.recompute_cost / g.total_cost()}
    none = row["schedule"]["none"]["peak"]
    for entry in row["schedule"].values():
        entry["relative_peak"] = entry["peak"] / none
    return row


def k_sweep(g: Graph) -> dict:
    """TWRemat(k) and kumar-path(k): (peak, length) for k = 1, 2, 4, ... on the joint graph."""
    j, end = joint_graph(g)
    out: dict = {}
    for solver in ("twremat", "kumar-path"):
        points, k = [], 1
        while True:
            plan = remat.solve(j, None, solver=solver, problem="schedule", final=end, k=k)
            points.append({"k": k, "peak": plan.peak, "relative_length": plan.stats["length"] / j.total_cost()})
            if k > plan.stats["bags"]:
                break
            k *= 2
        out[solver] = points
    return out


def dominated(point: dict, points: list[dict]) -> bool:
    return any(p["peak"] <= point["peak"] and p["relative_length"] <= point["relative_length"]
               and (p["peak"], p["relative_length"]) != (point["peak"], point["relative_length"]) for p in points)


def frontier_summary(sweep: dict) -> dict:
    """How many of each solver's points no point of the other dominates."""
    tw, kp = sweep["twremat"], sweep["kumar-path"]
    return {"kumar_path_points_undominated_by_twremat": sum(not dominated(p, tw) for p in kp),
            "twremat_points_undominated_by_kumar_path": sum(not dominated(p, kp) for p in tw),
            "points": {"twremat": len(tw), "kumar-path": len(kp)}}


# ---- report -------------------------------------------------------------------------------------------
def sketch(s: dict) -> str:
    entry = s.get("kumar-path balance=1")
    return "not run" if entry is None else f"{entry['relative_peak']:.3f}"


def markdown(rows: list[dict], sweeps: dict, header: dict) -> str:
    lines = ["# kumar-path (seed 004 §5) against TWRemat (§3)", "",
             f"Produced by `{header['command']}` on {header['date']} "
             f"({header['machine'].get('cpu_count')} CPUs). Schedule problem on each graph's joint "
             "forward+backward graph (seed 004 §2): peak M(σ) relative to NoRemat and length L(σ) "
             "relative to NoRemat's one pass; training problem: peak simulated by `remat.simulate`, "
             "relative to the vanilla step. Width: treewidth of TWRemat's min fill-in decomposition, "
             "pathwidth of kumar-path's spined decomposition. `balance=1`: the sketch's separator "
             "(the bag of the last node) always, without the balance rule.", "",
             "| family | graph | joint nodes | tw / pw | TWRemat peak | kumar-path peak | balance=1 peak "
             "| TWRemat length | kumar-path length | training peak TW / KP | training recompute TW / KP |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, t = r["schedule"], r["training"]
        tr_none = t["none"]["peak"]
        lines.append(
            f"| {r['family']} | {r['graph']} | {r['n_joint']} | {s['twremat'].get('treewidth')} / "
            f"{s['kumar-path'].get('pathwidth')} | {s['twremat']['relative_peak']:.3f} | "
            f"{s['kumar-path']['relative_peak']:.3f} | {sketch(s)} | "
            f"{s['twremat']['relative_length']:.2f} | {s['kumar-path']['relative_length']:.2f} | "
            f"{t['twremat']['peak'] / tr_none:.3f} / {t['kumar-path']['peak'] / tr_none:.3f} | "
            f"{t['twremat']['recompute_per_forward']:.2f} / {t['kumar-path']['recompute_per_forward']:.2f} |")
    lines += ["", "## Where kumar-path wins and where not", ""]
    wins = [r for r in rows if r["schedule"]["kumar-path"]["peak"] < r["schedule"]["twremat"]["peak"] * (1 - 1e-9)]
    ties = [r for r in rows if abs(r["schedule"]["kumar-path"]["peak"] - r["schedule"]["twremat"]["peak"])
            <= 1e-9 * r["schedule"]["twremat"]["peak"]]
    losses = [r for r in rows if r not in wins and r not in ties]
    shorter = [r for r in rows
               if r["schedule"]["kumar-path"]["relative_length"] < r["schedule"]["twremat"]["relative_length"]]

    def names(rs: list[dict]) -> str:
        return ", ".join(f"{r['graph']} ({r['schedule']['kumar-path']['relative_peak']:.3f} vs "
                         f"{r['schedule']['twremat']['relative_peak']:.3f})" for r in rs) or "none"

    lines += [f"- Lower peak M(σ) than TWRemat on {len(wins)} of {len(rows)} graphs: {names(wins)}.",
              f"- Equal peak on {len(ties)}: {names(ties)}.",
              f"- Higher peak on {len(losses)}: {names(losses)}.",
              f"- Shorter schedule than TWRemat on {len(shorter)} of {len(rows)} graphs: "
              + (", ".join(f"{r['graph']} ({r['schedule']['kumar-path']['relative_length']:.2f} vs "
                           f"{r['schedule']['twremat']['relative_length']:.2f})" for r in shorter) or "none") + "."]
    ran = [r for r in rows if "kumar-path balance=1" in r["schedule"]]
    sketch_worse = [r for r in ran if r["schedule"]["kumar-path balance=1"]["peak"] > r["schedule"]["kumar-path"]["peak"]]
    sketch_better = [r for r in ran if r["schedule"]["kumar-path balance=1"]["peak"] < r["schedule"]["kumar-path"]["peak"]]
    lines.append(f"- The sketch's separator alone (`balance=1`, run on graphs of at most {SKETCH_LIMIT} joint nodes: "
                 f"beyond, its recursion, linear in depth on a training graph, took minutes or ran out of memory) has a "
                 f"higher peak than the balanced rule on {len(sketch_worse)} of {len(ran)} graphs ("
                 + ", ".join(r["graph"] for r in sketch_worse) + ") and a lower one on "
                 f"{len(sketch_better)} (" + ", ".join(r["graph"] for r in sketch_better) + ").")
    if sweeps:
        lines += ["", "## Cut-off trade-off (k = 1, 2, 4, ...) on the Table 1 graphs", "",
                  "| graph | TWRemat points not dominated by kumar-path | kumar-path points not dominated by TWRemat "
                  "| least peak TW / KP | length at least peak TW / KP |", "|---|---|---|---|---|"]
        for name, sw in sweeps.items():
            f = frontier_summary(sw)
            tw = min(sw["twremat"], key=lambda p: (p["peak"], p["relative_length"]))
            kp = min(sw["kumar-path"], key=lambda p: (p["peak"], p["relative_length"]))
            lines.append(f"| {name} | {f['twremat_points_undominated_by_kumar_path']} of {f['points']['twremat']} | "
                         f"{f['kumar_path_points_undominated_by_twremat']} of {f['points']['kumar-path']} | "
                         f"{tw['peak'] / 2**30:.3f} / {kp['peak'] / 2**30:.3f} GiB | "
                         f"{tw['relative_length']:.1f} / {kp['relative_length']:.1f} |")
    table1 = [r for r in rows if r["family"].startswith("seed 004")]
    widths = ", ".join(f"{r['graph']} {r['schedule']['kumar-path'].get('pathwidth')} vs "
                       f"{r['schedule']['twremat'].get('treewidth')}" for r in table1)
    longer = ", ".join(r["graph"] for r in table1
                       if r["schedule"]["kumar-path"]["relative_length"] > r["schedule"]["twremat"]["relative_length"])
    lines += ["", "Reading: on branching graphs a path decomposition is much wider than a tree decomposition "
              f"(pathwidth vs treewidth: {widths}) and kumar-path holds a bag per recursion level; its schedules "
              f"are longer on {longer or 'none of them'}. Its peak is nonetheless lower on several graphs "
              "(above). The other difference from TWRemat is the separator rule, which prefers the bag holding "
              "the piece's last node (the sketch's X_c), so that a call computing that node makes no final pass "
              "over its sides; which of the two differences accounts for the lower peaks was not isolated. On "
              "chains and ladders both decompositions have the same width and the schedules differ only in where the separators fall. The training "
              "problem goes through the joint graph for both, and `remat.simulate` counts autograd's gradient "
              "buffers, which the schedule problem's M(σ) does not, so its ranking can differ. See the module "
              "docstring of `remat.solvers.kumar_path` for what the sketch of §5 leaves open and how it is filled.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small graphs only (a smoke run)")
    ap.add_argument("--out", default=str(RESULTS), help="results folder")
    ap.add_argument("--report-only", action="store_true", help="re-render kumar_path.md from kumar_path.json")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        data = json.loads((out / "kumar_path.json").read_text())
        (out / "kumar_path.md").write_text(markdown(data["rows"], data["k_sweeps"], data))
        return 0
    tw = _load_twremat_bench()
    graphs: list[tuple[Graph, str]] = []
    graphs += [(Graph.chain(n, name=f"chain{n}"), "chain") for n in ((25, 50) if args.quick else (50, 100, 200, 400, 800))]
    graphs += [(ladder(n), "ladder") for n in ((10, 20) if args.quick else (25, 50, 100, 200, 400))]
    graphs += [(unet(d), "u-net") for d in ((2, 3) if args.quick else (2, 3, 4, 5, 6))]
    table1 = ([tw.ffn_graph(10), tw.resnet_graph((1, 1, 1, 1), name="resnet-tiny")] if args.quick else
              [tw.ffn_graph(100), tw.resnet_graph(), tw.transformer_graph()])
    graphs += [(g, "seed 004 Table 1 (TF ops)") for g in table1]
    rows = []
    for g, family in graphs:
        rows.append(compare(g, family))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "training"}), flush=True)
    sweeps = {g.name: k_sweep(g) for g in table1}
    header = provenance(argv if argv is not None else sys.argv)
    (out / "kumar_path.json").write_text(json.dumps(
        {**header, "cost": "unit per op; memory: units (families) or float32 bytes (Table 1 graphs)",
         "rows": rows, "k_sweeps": sweeps,
         "frontiers": {name: frontier_summary(sw) for name, sw in sweeps.items()}}, indent=1))
    (out / "kumar_path.md").write_text(markdown(rows, sweeps, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
