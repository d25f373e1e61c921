"""The predicted frontier of every solver on a captured transformer (DESIGN.md, "The frontier").

    .venv/bin/python bench/bench_frontier.py [--quick] [--layers 6] [--batch 4] [--seq 128]

writes bench/results/frontier_mistral_cpu.json and frontier_mistral_cpu.png.

The model: Hugging Face ``MistralForCausalLM`` from a small config (6 layers, hidden 128,
intermediate 256, 4 heads, 2 key-value heads, vocabulary 1000), batch 4, sequence 128, on the
CPU, captured with ``remat.capture(model, {"input_ids": ids, "use_cache": False})`` (FLOP costs).
Where the capture records no module paths (``Node.module``), they are added here from forward
hooks during the same trace (``capture_with_modules``), so the per-block solvers can run.

For each budget from 100% of the vanilla step's simulated activation peak down to the floor,
every training solver (but the yardsticks milp and dp-exhaustive) plans at that budget; each
plan is judged as the runtime executes it (``selective.predict``: ``runtime.predict`` without
torch). A point is (predicted peak / vanilla peak, recompute cost / cost of one forward), for
the plans that fit. ``auto`` runs with its default 30 s limit. Planning seconds are wall time
on a shared 2-core machine: indicative only. Prints auto's recompute fraction at 90/70/50%.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import remat
from remat import schedule, solvers
from remat.machine import provenance
from remat.simulate import simulate_training
from remat.solvers.selective import predict

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
BUDGETS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1, 0.05)
QUICK_BUDGETS = (1.0, 0.9, 0.7, 0.5, 0.3, 0.2)
YARDSTICKS = ("milp", "dp-exhaustive")


def build_mistral(layers: int = 6, hidden: int = 128, intermediate: int = 256, batch: int = 4, seq: int = 128):
    """A small MistralForCausalLM and its inputs (use_cache=False, as capture requires)."""
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=1000, hidden_size=hidden, intermediate_size=intermediate,
                        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=seq, sliding_window=None)
    model = MistralForCausalLM(cfg)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    return model, {"input_ids": ids, "use_cache": False}


def capture_with_modules(model: Any, inputs: Any) -> remat.Graph:
    """``remat.capture``, with ``Node.module`` filled from forward hooks if the capture has none.

    The hooks note how many fx nodes the trace had when each module's forward began and ended;
    each node gets the innermost module open when it was traced, and the functionalizing second
    trace carries it over (fx's preserved node meta). Relies on capture's two-pass tracing
    (``capture._make_fx``); if that is not there, the graph comes back without module paths.
    """
    graph = remat.capture(model, inputs)
    if any(graph[v].module for v in graph.order):
        return graph
    cap = importlib.import_module("remat.capture")
    if not hasattr(cap, "_make_fx"):
        return graph
    modules: dict[str, str] = {}
    original = cap._make_fx

    def traced(fn, flat, label):
        gm = _make_fx_with_modules(model, fn, flat)
        for n in gm.graph.nodes:
            path = (n.meta.get("custom") or {}).get("remat_module")
            if path:
                modules[n.name] = path
        return gm

    cap._make_fx = traced
    try:
        annotated = remat.capture(model, inputs)
    except Exception:  # noqa: BLE001 - hooks are a bench convenience: fall back to no module paths
        return graph
    finally:
        cap._make_fx = original
    for v in annotated.order:
        if v in modules:
            object.__setattr__(annotated[v], "module", modules[v])
    return annotated


def _make_fx_with_modules(model: Any, fn: Any, flat: list) -> Any:
    import torch.fx as fx
    import torch.fx.traceback as fx_traceback
    from torch.func import functionalize
    from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx

    events: list[tuple[int, str, int]] = []

    def hook(name: str, enter: int):
        def record(*_: Any) -> None:
            mode = get_proxy_mode()
            if mode is not None:
                events.append((len(mode.tracer.graph.nodes), name, enter))
        return record

    handles = []
    for name, mod in model.named_modules():
        if name:
            handles.append(mod.register_forward_pre_hook(hook(name, 1)))
            handles.append(mod.register_forward_hook(hook(name, -1)))
    try:
        gm0 = make_fx(fn, tracing_mode="fake", _allow_non_fake_inputs=True)(*flat)
    finally:
        for h in handles:
            h.remove()
    stack: list[str] = []
    j = 0
    for i, n in enumerate(gm0.graph.nodes):
        while j < len(events) and events[j][0] <= i:
            _, name, enter = events[j]
            if enter > 0:
                stack.append(name)
            elif stack and stack[-1] == name:
                stack.pop()
            j += 1
        if stack:
            n.meta.setdefault("custom", {})["remat_module"] = stack[-1]
    with fx_traceback.preserve_node_meta():
        return make_fx(functionalize(lambda *a: fx.Interpreter(gm0).run(*a), remove="mutations"),
                       tracing_mode="fake", _allow_non_fake_inputs=True)(*flat)


def frontier(graph: remat.Graph, budgets: tuple[float, ...], names: list[str] | None = None,
             auto_time_limit: float = 30.0, progress: bool = False) -> dict:
    """Rows (solver, budget fraction, fits, predicted peak fraction, recompute fraction, seconds)."""
    vanilla = simulate_training(graph, schedule.vanilla(graph)).peak
    forward = graph.total_cost()
    names = names or [n for n in solvers.names("training") if n not in YARDSTICKS]
    rows = []
    for name in names:
        options = {"time_limit": auto_time_limit} if name == "auto" else {}
        for frac in budgets:
            started = time.perf_counter()
            try:
                plan = solvers.get(name).fn(graph, frac * vanilla, mode="time", problem="training", **options)
            except (ValueError, RuntimeError) as e:
                rows.append({"solver": name, "budget": frac, "refused": str(e)[:200]})
                break
            seconds = time.perf_counter() - started
            row = {"solver": name, "budget": frac, "seconds": seconds, "fits": False}
            if plan.schedule:
                _, sim = predict(graph, plan)
                row.update(fits=sim.peak <= frac * vanilla * (1 + 1e-9), peak=sim.peak / vanilla,
                           recompute=sim.recompute_cost / forward)
                if name == "auto":
                    row["chosen"] = plan.stats.get("chosen")
                if "cut_short" in plan.stats:
                    row["cut_short"] = plan.stats["cut_short"]
            rows.append(row)
            if progress:
                print(f"  {name:24s} {frac:5.2f}  fits={row['fits']!s:5s} peak={row.get('peak', float('nan')):.3f} "
                      f"recompute={row.get('recompute', float('nan')):.4f}  {seconds:6.2f} s", flush=True)
    return {"vanilla_peak": vanilla, "forward_cost": forward, "nodes": len(graph), "rows": rows}


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    by: dict[str, list[dict]] = {}
    for r in result["rows"]:
        if r.get("fits"):
            by.setdefault(r["solver"], []).append(r)
    colors = plt.get_cmap("tab20").colors
    for i, (name, rs) in enumerate(sorted(by.items())):
        pts = sorted((r["peak"], r["recompute"]) for r in rs)
        if name == "auto":
            style = dict(lw=3, color="black", alpha=0.35, zorder=5)
        else:
            style = dict(lw=1.2, color=colors[i % len(colors)], ls=("-", "--", ":")[i % 3], zorder=6)
        ax.plot([p for p, _ in pts], [c for _, c in pts], marker="o", ms=3, label=name, **style)
    ax.set_xlabel("predicted activation peak / vanilla peak")
    ax.set_ylabel("recompute cost / one forward")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_title(f"{result['model']}: every solver's predicted frontier")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def replot(path: Path = RESULTS / "frontier_mistral_cpu.json") -> None:
    """Redraw the PNG from a result JSON."""
    plot(json.loads(Path(path).read_text()), Path(path).with_suffix(".png"))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer budgets")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--out", default=str(RESULTS / "frontier_mistral_cpu"), help="path without extension")
    args = ap.parse_args(argv)
    model, inputs = build_mistral(layers=args.layers, batch=args.batch, seq=args.seq)
    started = time.perf_counter()
    graph = capture_with_modules(model, inputs)
    capture_seconds = time.perf_counter() - started
    print(f"captured Mistral ({args.layers} layers, batch {args.batch}, seq {args.seq}): {len(graph)} nodes, "
          f"module paths: {any(graph[v].module for v in graph.order)}", flush=True)
    result = frontier(graph, QUICK_BUDGETS if args.quick else BUDGETS, progress=True)
    result.update(provenance(sys.argv if argv is None else ["bench/bench_frontier.py", *argv]))
    result.update(model=f"Mistral {args.layers}x128 (batch {args.batch}, seq {args.seq}, CPU)",
                  capture_seconds=capture_seconds, module_paths=any(graph[v].module for v in graph.order))
    auto = {r["budget"]: r for r in result["rows"] if r["solver"] == "auto"}
    result["auto"] = {f"{int(round(b * 100))}%": auto[b].get("recompute") for b in (0.9, 0.7, 0.5) if b in auto}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    plot(result, out.with_suffix(".png"))
    for b in (0.9, 0.7, 0.5):
        r = auto.get(b)
        if r is not None:
            print(f"auto at {int(b * 100)}%: recompute {r.get('recompute', float('nan')):.4f} of a forward "
                  f"({r.get('chosen')}), predicted peak {r.get('peak', float('nan')):.3f}, {r['seconds']:.1f} s")
    return result


if __name__ == "__main__":
    main()
