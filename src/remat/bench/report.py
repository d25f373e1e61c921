"""The Markdown report of a suite run: a headline table, every section's table, links to plots.

``headline`` condenses the sections into one row per network: the vanilla peak and the best
remat plan's memory reduction and time ratio, predicted (paper batch, simulated liveness) and,
where the network was also run, measured (profiler method, the run's batch and image size).
Every table says whether its figures are predicted or measured, and how.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

Rows = list[dict[str, Any]]
GIB, MIB = 2**30, 2**20


def _fmt(x: Any, scale: float = 1.0, pct: bool = False, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int) and scale == 1.0 and not pct:
        return str(x)
    if pct:
        return f"{100 * x:.0f}%"
    return f"{x / scale:.{digits}f}"


def md_table(columns: list[str], rows: Iterable[Iterable[Any]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _best(rows: Rows, peak: str) -> dict[str, Any] | None:
    plans = [r for r in rows if r.get("status") == "ok" and r.get("solver") != "none" and r.get(peak) is not None]
    return min(plans, key=lambda r: r[peak], default=None)


def allocator(rows: Rows) -> str:
    """The allocator-level method of measured rows: "cuda" (GPU runs) or "profiler" (CPU)."""
    return "cuda" if any(r.get("cuda_peak") is not None for r in rows) else "profiler"


def headline(sections: dict[str, Rows]) -> Rows:
    """One row per network: vanilla and the best plan, predicted and measured."""
    pred = sections.get("table1_predicted", [])
    meas = sections.get("table1_measured", [])
    out = []
    for net in dict.fromkeys(r["network"] for r in pred + meas):
        row: dict[str, Any] = {"network": net}
        mine = [r for r in pred if r["network"] == net]
        best = _best(mine, "simulated_peak")
        if best:
            row.update(predicted_batch=best.get("batch"), predicted_vanilla=best["vanilla_peak"],
                       predicted_best=best["method"], predicted_reduction=best["reduction"],
                       predicted_time_ratio=best["time_ratio"])
        mine = [r for r in meas if r["network"] == net]
        vanilla = next((r for r in mine if r.get("solver") == "none" and r.get("status") == "ok"), None)
        tc = next((r for r in mine if r.get("method") == "approx-tc" and r.get("status") == "ok"), None)
        alloc = allocator(meas)
        for kind in ("storage", alloc):
            best = _best(mine, f"{kind}_peak")
            if vanilla and best and vanilla.get(f"{kind}_peak"):
                row.update({f"measured_vanilla_{kind}": vanilla[f"{kind}_peak"],
                            f"measured_best_{kind}": best["method"],
                            f"measured_reduction_{kind}": best.get(f"reduction_{kind}"),
                            f"measured_time_ratio_{kind}": best.get("time_ratio"),
                            f"tc_reduction_{kind}": tc.get(f"reduction_{kind}") if tc else None})
        if vanilla:
            row.update(allocator=alloc, measured_size=f"batch {vanilla['batch']}, {vanilla.get('image_size') or '-'} px",
                       tc_time_ratio=tc.get("time_ratio") if tc else None)
        out.append(row)
    return out


def _headline_md(rows: Rows) -> str:
    alloc = next((r["allocator"] for r in rows if "allocator" in r), "profiler")

    def both(r: dict[str, Any], key: str, **kw: Any) -> str:
        return " / ".join(_fmt(r.get(f"{key}_{k}"), **kw) for k in ("storage", alloc))

    return md_table(
        ["network", "paper batch", "vanilla (pred.)", "best plan (pred.)", "reduction (pred.)",
         "time ratio (pred.)", "measured at", f"vanilla MiB (meas.: storage / {alloc})",
         f"best plan (meas.: storage / {alloc})", "its reduction (meas.)", "its time ratio (meas.)",
         "time-centric plan: reduction (meas.)", "time-centric plan: time ratio (meas.)"],
        [[r["network"], _fmt(r.get("predicted_batch")), _fmt(r.get("predicted_vanilla"), GIB) + " GiB",
          _fmt(r.get("predicted_best")), _fmt(r.get("predicted_reduction"), pct=True),
          _fmt(r.get("predicted_time_ratio")), _fmt(r.get("measured_size")),
          both(r, "measured_vanilla", scale=MIB, digits=1), both(r, "measured_best"),
          both(r, "measured_reduction", pct=True), both(r, "measured_time_ratio"),
          both(r, "tc_reduction", pct=True), _fmt(r.get("tc_time_ratio"))] for r in rows])


def peers_at_equal_peak(rows: Rows, slack: float = 0.01) -> Rows:
    """For each measured peer, remat's fastest plan whose measured peak is no higher (allocator
    level for both, ``slack`` for allocator rounding), and how their step times compare."""
    out = []
    peak = f"{allocator(rows)}_peak"
    ok = [r for r in rows if r.get("status") == "ok" and r.get(peak) and r.get("time_ratio")]
    for net in dict.fromkeys(r["network"] for r in ok):
        mine = [r for r in ok if r["network"] == net]
        plans = [r for r in mine if r.get("kind") == "remat"]
        for peer in (r for r in mine if r.get("kind") == "peer"):
            row = {"network": net, "peer": peer["method"], "peer_memory_ratio": peer["memory_ratio"],
                   "peer_time_ratio": peer["time_ratio"]}
            fits = [r for r in plans if r[peak] <= peer[peak] * (1 + slack)]
            best = min(fits, key=lambda r: r["time_ratio"], default=None)
            if best is None:
                low = min(plans, key=lambda r: r[peak], default=None)
                row["verdict"] = ("no remat plan measured" if low is None else
                                  f"no remat plan of the sweep reached this peak (lowest: {low['method']}, "
                                  f"memory {low['memory_ratio']:.2f})")
            else:
                row.update(remat_method=best["method"], remat_memory_ratio=best["memory_ratio"],
                           remat_time_ratio=best["time_ratio"])
                gap = best["time_ratio"] / peer["time_ratio"] - 1
                row["verdict"] = (f"remat no slower ({-100 * gap:.0f}% faster)" if gap <= 0
                                  else f"remat {100 * gap:.0f}% slower")
            out.append(row)
    return out


def _peers_md(rows: Rows) -> str:
    return md_table(["network", "peer", "peer memory / vanilla", "peer time ratio", "remat plan at <= that peak",
                     "its memory / vanilla", "its time ratio", "verdict"],
                    [[r["network"], r["peer"], _fmt(r["peer_memory_ratio"]), _fmt(r["peer_time_ratio"]),
                      _fmt(r.get("remat_method")), _fmt(r.get("remat_memory_ratio")), _fmt(r.get("remat_time_ratio")),
                      r["verdict"]] for r in rows])


def _status(r: dict[str, Any]) -> str:
    return "" if r.get("status") == "ok" else f"{r.get('status')}: {str(r.get('message', ''))[:80]}"


def _table1_predicted_md(rows: Rows) -> str:
    return md_table(["network", "batch", "#V", "method", "budget GiB", "eq.(2) peak GiB", "simulated peak GiB",
                     "reduction", "pred. time ratio", "solve s", "note"],
                    [[r["network"], _fmt(r.get("batch")), _fmt(r.get("nodes")), r["method"],
                      _fmt(r.get("budget"), GIB), _fmt(r.get("eq2_peak"), GIB), _fmt(r.get("simulated_peak"), GIB),
                      _fmt(r.get("reduction"), pct=True), _fmt(r.get("time_ratio")), _fmt(r.get("seconds")),
                      _status(r)] for r in rows])


def _table1_measured_md(rows: Rows) -> str:
    alloc = allocator(rows)
    return md_table(["network", "batch", "image", "method", "predicted MiB", "storage-tracking MiB",
                     f"{alloc} MiB", "reduction (storage)", f"reduction ({alloc})", "time ratio", "note"],
                    [[r["network"], r.get("batch"), _fmt(r.get("image_size")), r["method"],
                      _fmt(r.get("predicted_peak"), MIB, digits=1), _fmt(r.get("storage_peak"), MIB, digits=1),
                      _fmt(r.get(f"{alloc}_peak"), MIB, digits=1), _fmt(r.get("reduction_storage"), pct=True),
                      _fmt(r.get(f"reduction_{alloc}"), pct=True),
                      _fmt(r.get("time_ratio")), _status(r)] for r in rows])


def _seed003_md(t1: Rows, t2: Rows) -> str:
    a = md_table(["network", "#V", "method", "simulated peak MiB", "cut", "pred. time ratio", "note"],
                 [[r["network"], r["nodes"], r["method"], _fmt(r.get("simulated_peak"), MIB, digits=0),
                   _fmt(r.get("reduction"), pct=True), _fmt(r.get("time_ratio")), _status(r)] for r in t1])
    b = md_table(["network", "#V", "reforward solve s", "theoretical cut (eq. 1)", "simulated cut"],
                 [[r["network"], r["nodes"], _fmt(r.get("reforward_seconds"), digits=3),
                   _fmt(r.get("theoretical_cut"), pct=True), _fmt(r.get("simulated_cut"), pct=True)] for r in t2])
    return a + "\n\nSeed 003 Table 2 (solver runtime on this machine):\n\n" + b


def _schedule_md(rows: Rows, key: str) -> str:
    return md_table([key, "solver", "#V", "joint #V", "peak MiB", "length", "rel. length", "solve s"],
                    [[r[key], r["solver"], r["nodes"], r["joint_nodes"], _fmt(r["peak"], MIB, digits=1),
                      r["length"], _fmt(r["relative_length"]), _fmt(r["solve_seconds"], digits=3)] for r in rows])


def _tradeoff_md(rows: Rows, measured: bool) -> str:
    if measured:
        alloc = allocator(rows)
        vanilla = {r["network"]: r.get("storage_peak") for r in rows if r["method"] == "vanilla"}
        return md_table(["network", "method", f"{alloc} MiB", f"memory / vanilla ({alloc})", "time ratio",
                         "storage-tracking MiB", "memory / vanilla (storage)", "note"],
                        [[r["network"], r["method"], _fmt(r.get(f"{alloc}_peak"), MIB, digits=1),
                          _fmt(r.get("memory_ratio")), _fmt(r.get("time_ratio")),
                          _fmt(r.get("storage_peak"), MIB, digits=1),
                          _fmt(r["storage_peak"] / vanilla[r["network"]]
                               if r.get("storage_peak") and vanilla.get(r["network"]) else None),
                          _status(r)] for r in rows])
    return md_table(["network", "solver", "budget", "feasible", "simulated / vanilla", "pred. time ratio", "solve s"],
                    [[r["network"], r["solver"], _fmt(r["fraction"], pct=True), r.get("feasible", "-"),
                      _fmt(None if r.get("reduction") is None else 1 - r["reduction"]), _fmt(r.get("time_ratio")),
                      _fmt(r.get("solve_seconds"), digits=3)] for r in rows])


def write(path: Path, suite: str, sections: dict[str, Rows], plots: dict[str, Path],
          header: dict[str, Any], seconds: float) -> Path:
    m = header.get("machine", {})
    alloc = allocator([r for name in ("table1_measured", "tradeoff_measured") for r in sections.get(name, [])])
    where, level = (("GPU", "the CUDA allocator's peak (`torch.cuda.max_memory_allocated`)") if alloc == "cuda"
                    else ("CPU", "the profiler method (torch.profiler allocator replay)"))
    parts = [f"# remat bench: suite `{suite}`",
             f"Command: `{header.get('command')}`; {header.get('date', '')}; {seconds:.0f} s. Machine: "
             f"{m.get('platform')}, {m.get('cpu_count')} CPUs"
             + (f", {m['gpu']}" if m.get("gpu") else "")
             + f", Python {m.get('python')}, torch {m.get('torch')}, "
             f"{header.get('torch_threads', '?')} torch thread(s).",
             "**Predicted** figures: plans on seed 000's abstract graphs (`remat.zoo.graph`, cost conv 10 / "
             "other 1) at the paper's batch, peaks from the liveness simulator (`remat.simulate`) and eq. (2); "
             "predicted time ratio = 1 + recompute / (3 x forward cost). **Measured** figures: real "
             f"{where} training steps; memory by live-storage tracking (`remat.measure`, op level) and by "
             f"{level}; time ratios against vanilla from round-robin "
             "interleaved steps of the same run (median of per-round ratios)."]
    head = headline(sections)
    if head:  # a run of the trade-off alone has no Table 1 to condense
        parts += ["## Headline", _headline_md(head)]

    def add(title: str, key: str, body: str) -> None:
        parts.append(f"## {title}")
        if key in plots:
            parts.append(f"![{key}]({Path(plots[key]).name})")
        parts.append(body)

    if "table1_predicted" in sections:
        add("Seed 000 Table 1, PREDICTED (paper batch)", "table1_predicted",
            _table1_predicted_md(sections["table1_predicted"]))
    if "table1_measured" in sections:
        add(f"Seed 000 Table 1 methods, MEASURED on this {where}", "table1_measured",
            _table1_measured_md(sections["table1_measured"]))
    if "seed003_table1" in sections:
        add("Seed 003 Table 1, PREDICTED: regular vs Chen vs Re-forwarding", "seed003",
            _seed003_md(sections["seed003_table1"], sections.get("seed003_table2", [])))
    if "seed004_depth" in sections:
        add("Seed 004 Figures 2 and 3, PREDICTED: NoRemat / GreedyRemat / TWRemat vs depth", "seed004_depth",
            _schedule_md(sections["seed004_depth"], "depth"))
    if "seed004_transformer" in sections:
        add("Seed 004 Table 2, PREDICTED: Transformer", "", _schedule_md(sections["seed004_transformer"], "config"))
    for key, p in plots.items():
        if key.startswith("tradeoff_"):
            parts.append(f"## Trade-off {key.removeprefix('tradeoff_').replace('_', ' ')}\n\n![{key}]({Path(p).name})")
    if "tradeoff_predicted" in sections:
        add("Trade-off sweep, PREDICTED (table)", "", _tradeoff_md(sections["tradeoff_predicted"], False))
    if "tradeoff_measured" in sections:
        add(f"Trade-off with the peers, MEASURED ({alloc} method: allocator level, intra-op temporaries "
            "included, the only method that sees torch.compile; storage tracking: op level, eager steps only)", "",
            _tradeoff_md(sections["tradeoff_measured"], True))
        add(f"At equal measured peak: remat's fastest plan vs each peer ({alloc} method for both; from the "
            "measured trade-off above)", "", _peers_md(peers_at_equal_peak(sections["tradeoff_measured"])))
    path.write_text("\n\n".join(parts) + "\n")
    return path


SECTIONS = ("table1_predicted", "table1_measured", "seed003_table1", "seed003_table2", "seed004_depth",
            "seed004_transformer", "tradeoff_predicted", "tradeoff_measured")


def rewrite(out: Path) -> Path:
    """Write ``out/report.md`` again from the section JSONs and plots a run left there (after a
    change to the report, or for a run stopped before its end)."""
    import json

    sections: dict[str, Rows] = {}
    header: dict[str, Any] = {}
    for name in SECTIONS:
        path = out / f"{name}.json"
        if path.exists():
            data = json.loads(path.read_text())
            sections[name] = data["rows"]
            header = header or {k: data[k] for k in ("command", "date", "machine", "torch_threads") if k in data}
    if not sections:
        raise FileNotFoundError(f"{out} holds no section JSON of a bench run ({', '.join(SECTIONS)})")
    order = lambda p: (p.stem.startswith("tradeoff_"), p.stem.endswith("_measured"), p.stem)  # noqa: E731
    plots = {p.stem.replace("seed003_table1", "seed003"): p for p in sorted(out.glob("*.png"), key=order)}
    summary = out / "results.json"
    run = json.loads(summary.read_text()) if summary.exists() else {}
    suite = run.get("suite") or ("paper" if "--suite paper" in str(header.get("command")) else "quick")
    if run:  # the summary's headline from every section present, not only the last run's
        run["rows"] = headline(sections)
        run["files"] = sorted(p.name for p in out.iterdir())
        summary.write_text(json.dumps(run, indent=1, default=str))
    return write(out / "report.md", suite, sections, plots, header, run.get("seconds") or 0.0)
