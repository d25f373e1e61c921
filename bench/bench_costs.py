"""Costs in device time: do plans made with roofline or profiled op costs train faster than plans
made with FLOP costs, at the same measured peak?

    nice -n 5 .venv/bin/python bench/bench_costs.py --device cpu --out bench/results/costs_cpu
    .venv/bin/python bench/bench_costs.py --quick --models mlp --out /tmp/costs   # smoke run
    python3 bench/bench_costs.py --device cuda --size gpu --dtype bf16 --models gpt2,mistral \
        --budgets 0.7,0.5 --out OUT                # on a lent GPU (12 plans; not yet run on one)

Models, built from public configs as a user would: transformers ``MistralForCausalLM`` (6 layers,
hidden 128, intermediate 256, 4 heads, 2 key-value heads, vocabulary 1000) and
``GPT2LMHeadModel`` (6 layers, n_embd 128, 4 heads, vocabulary 1000), batch 4 x 128 tokens,
``use_cache=False``, loss from ``labels``; the zoo's ``resnet18`` (BatchNorm) at batch 4, 64 px;
``mlp`` (two Linear-LayerNorm-GELU layers), the quick model. ``--quick`` shrinks all of them.
``--size gpu``: the sizes a GPU trains at, where CPU sizes would only time kernel launches: Mistral
8 layers, hidden 1024, intermediate 3584, 16 heads, 8 key-value heads, vocabulary 32000, batch 4 x 1024;
GPT-2 12 x 768, 12 heads, vocabulary 50257 (dropout at its defaults), batch 8 x 1024; ResNet-18 at batch
64, 224 px. ``--dtype bf16``: planned, measured and timed under ``torch.autocast(bf16)``.

For each cost in (flops, roofline, profile) and budget in (90%, 70%, 50%, 30%):
``remat.optimize(model, inputs, budget=b, cost=c)`` (solver auto, verify on: the budget is of the
measured vanilla peak and the measured plan must fit), timed as planning seconds (the profile's
first plan times the ops, on an empty cache; later plans read the cache). Then, as in
bench/bench_compiled.py: the measured peak (``remat.measure``: the live-storage tracker on the
CPU, the CUDA allocator's peak on a GPU) as a fraction of vanilla's, and the step time as a ratio
to vanilla, every plan of a model and vanilla timed round-robin in one process (median over
rounds of the per-round ratio). The CPU runs on one thread (``--threads``) for timing stability.

Matched peak: each cost's frontier is the best time ratio among its plans whose measured peak is
at most p; the report averages it over the measured peaks at which every cost has a plan.

Writes OUT/results.json (after every model), OUT/report.md (a hand-written "## Discussion" section
at its end is kept when the script rewrites it), OUT/COMMANDS.md and OUT/costs_<device>.png.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import remat  # noqa: E402
from remat.bench.steps import interleave, time_ratios  # noqa: E402
from remat.compiled import costs as cost_models  # noqa: E402
from remat.measure import measure, synchronize, training_step  # noqa: E402

MODELS = ("mistral", "gpt2", "resnet18", "mlp")
COSTS = ("flops", "roofline", "profile")
BUDGETS = (0.9, 0.7, 0.5, 0.3)
QUICK_BUDGETS = (0.9, 0.75)
MATCH = 0.03  # plans whose measured peaks are within 3% of each other count as matched pairs


def log(msg: str) -> None:
    print(msg, flush=True)


# ---- models ----------------------------------------------------------------------------------


def build(name: str, device: str, quick: bool, size: str = "cpu") -> tuple[nn.Module, Any, str]:
    """(model, inputs, what was built) on ``device``, seeded."""
    torch.manual_seed(0)
    gpu = size == "gpu"
    layers, width, seq, batch = (2, 32, 32, 2) if quick else (6, 128, 128, 4)
    vocab = 1000
    if name == "mistral":
        from transformers import MistralConfig, MistralForCausalLM

        kw = (dict(vocab_size=32000, hidden_size=1024, intermediate_size=3584, num_hidden_layers=8,
                   num_attention_heads=16, num_key_value_heads=8) if gpu else
              dict(vocab_size=vocab, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
                   num_attention_heads=4, num_key_value_heads=2))
        seq, batch, vocab = (1024, 4, 32000) if gpu else (seq, batch, vocab)
        model = MistralForCausalLM(MistralConfig(**kw, max_position_embeddings=seq, use_cache=False))
        source = f"MistralForCausalLM(MistralConfig({_args(kw)}, use_cache=False))"
    elif name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        kw = (dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12) if gpu else
              dict(vocab_size=vocab, n_embd=width, n_layer=layers, n_head=4))
        seq, batch, vocab = (1024, 8, 50257) if gpu else (seq, batch, vocab)
        model = GPT2LMHeadModel(GPT2Config(**kw, n_positions=seq, use_cache=False))
        source = f"GPT2LMHeadModel(GPT2Config({_args(kw)}, use_cache=False))"
    elif name == "resnet18":
        from remat import zoo

        side, batch = (224, 64) if gpu else (32 if quick else 64, batch)
        model, inputs = zoo.build("resnet18", batch=batch, image_size=side, device=device)
        return model.train(), inputs, f'remat.zoo.build("resnet18", batch={batch}, image_size={side})'
    elif name == "mlp":
        width = 64 if quick else 256
        model = nn.Sequential(nn.Linear(16, width), nn.LayerNorm(width), nn.GELU(), nn.Linear(width, width),
                              nn.LayerNorm(width), nn.GELU(), nn.Linear(width, 4))
        x = torch.randn(8 * batch, 16, device=device)
        return model.to(device).train(), (x,), f"2-layer MLP, width {width}, LayerNorm + GELU, batch {8 * batch}"
    else:
        raise SystemExit(f"unknown model {name!r}: use {', '.join(MODELS)}")
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    return model.to(device).train(), {"input_ids": ids, "labels": ids}, f"{source}, batch {batch} x {seq} tokens"


def _args(kw: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kw.items())


def autocast(args: argparse.Namespace) -> Any:
    """The step's autocast block: bf16 under ``--dtype bf16``, else none."""
    return torch.autocast(torch.device(args.device).type, torch.bfloat16, enabled=args.dtype == "bf16")


def under(step: Callable[[], None], args: argparse.Namespace) -> Callable[[], None]:
    def run() -> None:
        with autocast(args):
            step()
    return run


# ---- one model -------------------------------------------------------------------------------


def synced(step: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        step()
        synchronize()
    return run


def run_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every (cost, budget) plan of one model: planning seconds, measured peak, time ratio."""
    model, inputs, source = build(name, args.device, args.quick, args.size)
    with autocast(args):
        vanilla = measure(model, inputs).peak
    log(f"[{name}] {source}: vanilla peak {vanilla / 2 ** 20:.2f} MiB")
    rows: list[dict[str, Any]] = []
    planned: dict[str, nn.Module] = {}
    for cost in args.costs:
        for budget in args.budgets:
            label = f"{cost} {budget:.0%}"
            row: dict[str, Any] = {"model": name, "cost": cost, "budget": budget, "method": label}
            rows.append(row)
            timed = cost_models.timed
            started = time.perf_counter()
            try:
                with autocast(args):
                    module = remat.optimize(model, inputs, budget=f"{round(budget * 100)}%", cost=cost)
            except Exception as e:  # noqa: BLE001 - an infeasible budget is a row, not the end of the run
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                log(f"[{name}] {label}: {row['error'][:120]}")
                continue
            report = module.report
            row.update(planning_seconds=time.perf_counter() - started, ops_timed=cost_models.timed - timed,
                       solver=report.get("chosen") or report.get("solver"),
                       peak=_measured(module, inputs, args), cost_notes=_notes(module))
            row["peak_fraction"] = row["peak"] / vanilla
            planned[label] = module
            log(f"[{name}] {label}: peak {row['peak_fraction']:.3f} of vanilla, planned in "
                f"{row['planning_seconds']:.1f} s ({row['ops_timed']} ops timed), {row['solver']}")
    steps = {"vanilla": synced(under(training_step(model, inputs), args))}
    steps.update({label: synced(under(training_step(m, inputs), args)) for label, m in planned.items()})
    times = interleave(steps, repeats=args.repeats, warmup=1)
    ratios = time_ratios(times, "vanilla")
    for row in rows:
        if row["method"] in ratios:
            row.update(time_ratio=ratios[row["method"]], step_seconds=statistics.median(times[row["method"]]))
            log(f"[{name}] {row['method']}: time x{row['time_ratio']:.3f}")
    del planned, steps
    gc.collect()
    return {"model": name, "source": source, "vanilla_peak": vanilla,
            "vanilla_step_seconds": statistics.median(times["vanilla"]), "rows": rows}


def _measured(module: nn.Module, inputs: Any, args: argparse.Namespace) -> int:
    with autocast(args):
        return measure(module, inputs).peak


def _notes(module: nn.Module) -> list[str]:
    step = getattr(module, "step", None)
    planned = getattr(step, "planned", None)
    joint = getattr(planned, "joint", None)
    return list(getattr(joint, "cost_notes", []))


# ---- matched peak ----------------------------------------------------------------------------


def frontier(rows: list[dict[str, Any]], cost: str) -> list[tuple[float, float]]:
    return sorted((r["peak_fraction"], r["time_ratio"]) for r in rows if r["cost"] == cost and "time_ratio" in r)


def best_within(points: list[tuple[float, float]], peak: float) -> float | None:
    """The best time ratio among plans whose measured peak is at most ``peak`` (1% slack)."""
    within = [t for p, t in points if p <= peak * 1.01]
    return min(within) if within else None


def matched(rows: list[dict[str, Any]], costs: list[str]) -> dict[str, Any]:
    """Each cost's frontier averaged over the measured peaks at which every cost has a plan, and
    the pairs of plans whose peaks are within ``MATCH`` of each other."""
    fronts = {c: frontier(rows, c) for c in costs}
    if any(not f for f in fronts.values()):
        return {"grid": [], "mean": {}, "pairs": []}
    low = max(f[0][0] for f in fronts.values())
    grid = sorted({p for f in fronts.values() for p, _ in f if p >= low})
    mean = {c: statistics.fmean(best_within(f, p) for p in grid) for c, f in fronts.items()}
    pairs = []
    base = fronts.get("flops", [])
    for other in (c for c in costs if c != "flops"):
        for p, t in base:
            near = [(abs(q - p), q, u) for q, u in fronts[other] if abs(q - p) <= MATCH * p]
            if near:
                _, q, u = min(near)
                pairs.append({"cost": other, "flops_peak": p, "flops_time": t, "peak": q, "time": u})
    return {"grid": grid, "mean": mean, "pairs": pairs}


# ---- output ----------------------------------------------------------------------------------


def report(result: dict[str, Any]) -> str:
    costs = result["costs"]
    lines = [f"# Op costs in device time ({result['device']})", "",
             f"torch {result['torch']}, {result['machine']}, {result['threads']} thread(s); "
             f"{result['repeats']} timed rounds per model (plans and vanilla round-robin). Command: "
             f"`{result['command']}` (COMMANDS.md).", "",
             "Peak: measured activation peak / vanilla's; time: step time / vanilla's, median over rounds. "
             "Planning: seconds of `remat.optimize` (tracing, planning, the verifying step; for `profile` "
             "the op timings, on an empty cache at its first budget).", ""]
    summary = ["| model | " + " | ".join(f"{c}: mean time at matched peak" for c in costs) + " | best |",
               "|---|" + "---|" * (len(costs) + 1)]
    for m in result["models"]:
        rows = m["rows"]
        lines += [f"## {m['model']}", "", f"`{m['source']}`; vanilla peak {m['vanilla_peak'] / 2 ** 20:.2f} MiB, "
                  f"step {m['vanilla_step_seconds'] * 1e3:.1f} ms.", "",
                  "| budget | " + " | ".join(f"{c} peak / time / plan s" for c in costs) + " |",
                  "|---|" + "---|" * len(costs)]
        for b in result["budgets"]:
            cells = []
            for c in costs:
                r = next((r for r in rows if r["cost"] == c and r["budget"] == b), None)
                if r is None or "time_ratio" not in r:
                    cells.append("refused" if r is not None and "error" in r else "-")
                else:
                    cells.append(f"{r['peak_fraction']:.3f} / {r['time_ratio']:.3f} / {r['planning_seconds']:.1f}")
            lines.append(f"| {b:.0%} | " + " | ".join(cells) + " |")
        mt = m.get("matched") or matched(rows, costs)
        if mt["mean"]:
            best = min(mt["mean"], key=mt["mean"].get)
            lines += ["", f"Matched peak ({len(mt['grid'])} measured peaks from {mt['grid'][0]:.3f} to "
                      f"{mt['grid'][-1]:.3f}): mean best time ratio " +
                      ", ".join(f"{c} {v:.3f}" for c, v in mt["mean"].items()) + f"; best: **{best}**."]
            summary.append(f"| {m['model']} | " + " | ".join(f"{mt['mean'][c]:.3f}" for c in costs) + f" | {best} |")
        for p in mt["pairs"]:
            lines.append(f"- flops at peak {p['flops_peak']:.3f}: x{p['flops_time']:.3f}; {p['cost']} at "
                         f"{p['peak']:.3f}: x{p['time']:.3f}")
        notes = sorted({n for r in rows for n in r.get("cost_notes", []) if "estimated by the roofline:" in n})
        if notes:
            lines += ["", "Profile fallbacks: " + "; ".join(n.replace("profile: ", "") for n in notes) + "."]
        lines.append("")
    lines += ["## Summary", "", *summary, "", result.get("conclusion", ""), ""]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = result["models"]
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 4.2), squeeze=False)
    for ax, m in zip(axes[0], models):
        for c, style in zip(result["costs"], ("o-", "s--", "^-.")):
            pts = frontier(m["rows"], c)
            if pts:
                ax.plot([p for p, _ in pts], [t for _, t in pts], style, label=c, ms=5)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_title(m["model"])
        ax.set_xlabel("measured peak / vanilla peak")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("step time / vanilla step time")
    axes[0][0].legend()
    fig.suptitle(f"remat plans by op cost model ({result['device']}, {result['threads']} thread(s))")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def conclusion(result: dict[str, Any]) -> str:
    """Which cost gives the fastest plans at matched peak, over the models measured."""
    means = {c: [m["matched"]["mean"][c] for m in result["models"] if m["matched"]["mean"]] for c in result["costs"]}
    wins = {c: sum(1 for m in result["models"] if m["matched"]["mean"]
                   and min(m["matched"]["mean"], key=m["matched"]["mean"].get) == c) for c in result["costs"]}
    if not any(means.values()):
        return "No model had plans of every cost to compare."
    overall = {c: statistics.fmean(v) for c, v in means.items() if v}
    best = min(overall, key=overall.get)
    return (f"Over {len(means[best])} model(s), mean time ratio at matched peak: "
            + ", ".join(f"{c} {v:.3f} ({wins[c]} model(s) best)" for c, v in overall.items())
            + f". Fastest plans on {result['device']}: **{best}** costs.")


def write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for m in result["models"]:
        m["matched"] = matched(m["rows"], result["costs"])
    result["conclusion"] = conclusion(result)
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "report.md").write_text(report(result) + discussion(out / "report.md"))
    (out / "COMMANDS.md").write_text(f"# How these results were made\n\n```\n{result['command']}\n```\n\n"
                                     f"torch {result['torch']}, {result['machine']}, cache of op timings "
                                     "empty at the start (a temporary REMAT_CACHE_DIR).\n")
    if result["models"]:
        plot(result, out / f"costs_{result['device']}.png")


def discussion(path: Path) -> str:
    """The hand-written "## Discussion" section of an earlier report, kept when it is rewritten."""
    try:
        text = path.read_text()
    except OSError:
        return ""
    at = text.find("\n## Discussion")
    return text[at:].lstrip("\n") if at >= 0 else ""


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--models", default="mistral,gpt2,resnet18")
    p.add_argument("--costs", default=",".join(COSTS))
    p.add_argument("--budgets", default=None, help="fractions, e.g. 0.9,0.7,0.5,0.3")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds (default 9; quick 3)")
    p.add_argument("--threads", type=int, default=1, help="torch threads on the CPU (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny models, two budgets, three rounds")
    p.add_argument("--size", choices=("cpu", "gpu"), default="cpu", help="model sizes (module docstring)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="bf16: under torch.autocast")
    p.add_argument("--cache", default=None, help="REMAT_CACHE_DIR to use (default: a new empty one)")
    p.add_argument("--out", default=None, help="default bench/results/costs_<device>")
    args = p.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.costs = [c for c in args.costs.split(",") if c]
    args.budgets = ([float(b) for b in args.budgets.split(",")] if args.budgets
                    else list(QUICK_BUDGETS if args.quick else BUDGETS))
    args.repeats = args.repeats or (3 if args.quick else 9)
    args.out = Path(args.out or ROOT / "bench" / "results" / f"costs_{torch.device(args.device).type}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    device = torch.device(args.device).type
    if device == "cpu":
        torch.set_num_threads(args.threads)
    saved_cache = os.environ.get("REMAT_CACHE_DIR")
    scratch = None if args.cache else tempfile.mkdtemp(prefix="remat-costs-")
    os.environ["REMAT_CACHE_DIR"] = args.cache or scratch
    runner = "nice -n 5 .venv/bin/python" if device == "cpu" else "python3"
    command = f"{runner} bench/bench_costs.py " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    result: dict[str, Any] = {"device": device, "torch": torch.__version__, "machine": _machine(device),
                              "threads": torch.get_num_threads(), "repeats": args.repeats, "costs": args.costs,
                              "budgets": args.budgets, "quick": args.quick, "size": args.size, "dtype": args.dtype,
                              "command": command, "models": []}
    started = time.perf_counter()
    try:
        for name in args.models:
            try:
                result["models"].append(run_model(name, args))
            except Exception:  # noqa: BLE001 - one model's failure is reported, the others still run
                log(traceback.format_exc())
                result.setdefault("failed", {})[name] = traceback.format_exc(limit=3)
            result["seconds"] = time.perf_counter() - started
            write(result, args.out)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        if saved_cache is None:
            os.environ.pop("REMAT_CACHE_DIR", None)
        else:
            os.environ["REMAT_CACHE_DIR"] = saved_cache
    log(result.get("conclusion", ""))
    log(f"wrote {args.out} in {time.perf_counter() - started:.0f} s")
    return 0 if not result.get("failed") else 1


def _machine(device: str) -> str:
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"{cost_models._cpu_model()} ({os.cpu_count()} cores, {platform.machine()})"


if __name__ == "__main__":
    raise SystemExit(main())
