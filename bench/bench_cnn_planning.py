"""Planning a full-size CNN for inductor: seconds to the first step, and whether the budget is met.

HF ``ResNetForImageClassification(ResNetConfig(depths=[3, 8, 36, 3]))`` (ResNet-152, the public
config's layout, default arguments) on 224 px images, batch ``--batch`` (the graph's size is set by
the depth, not the batch), fp32 and bf16 autocast, compiled with
``torch.compile(model, backend=remat.backend(budget, compiler="inductor"))``. For each: the first
call's seconds (Dynamo, planning, inductor) and the plan's own planning seconds, the plan's
predicted peak, the step's measured peak (CPU allocator replay, ``remat.measure`` "profiler",
parameter gradients excluded) against eager's, and the plan's notes. ``--compile`` adds plain
``torch.compile``'s first call, for scale. ``--plan-cache DIR``: the backend keeps its plans there, so
a second run with it times a restarted run's first call (plans loaded, not searched).

    python bench/bench_cnn_planning.py --dtypes bf16,fp32 --budget 50% --out bench/results/cnn_planning_cpu
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.bench.steps import interleave, time_ratios  # noqa: E402
from remat.measure import measure  # noqa: E402


def build(depths: list[int], batch: int, side: int, widths: list[int] | None = None) -> tuple[torch.nn.Module, dict,
                                                                                              torch.Tensor]:
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    sizes = {"hidden_sizes": widths, "embedding_size": widths[0] // 2} if widths else {}
    model = ResNetForImageClassification(ResNetConfig(depths=depths, **sizes)).train()
    images = torch.randn(batch, 3, side, side)
    labels = torch.randint(0, model.config.num_labels, (batch,))
    return model, {"pixel_values": images}, labels


def first_call(task: torch.nn.Module, inputs: dict) -> float:
    started = time.perf_counter()
    task(**inputs).backward()
    return time.perf_counter() - started


def run(dtype_name: str, args: argparse.Namespace) -> dict:
    dtype = torch.bfloat16 if dtype_name == "bf16" else None
    model, inputs, labels = build(args.depths, args.batch, args.side, args.widths)

    def task(net: torch.nn.Module) -> torch.nn.Module:
        return heldout.Task(net, "vision", labels, dtype)

    row: dict = {"dtype": dtype_name, "budget": args.budget}
    row["eager_peak"] = measure(task(copy.deepcopy(model)), inputs, method="profiler").peak
    peer = None
    if args.compile:
        torch._dynamo.reset()
        peer = task(torch.compile(copy.deepcopy(model)))
        row["compile_first_call_s"] = first_call(peer, inputs)
    if peer is None or not args.steps:  # (a reset would make the peer compile again in the timed rounds)
        torch._dynamo.reset()
    backend = remat.backend(budget=args.budget, compiler="inductor", plan_cache=args.plan_cache)
    net = task(torch.compile(copy.deepcopy(model), backend=backend))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        row["remat_first_call_s"] = first_call(net, inputs)
        row["remat_peak"] = measure(net, inputs, method="profiler").peak
    row["warnings"] = sorted({str(w.message) for w in caught if "remat" in str(w.message)})
    rep = backend.report[-1]
    row.update({k: rep.get(k) for k in ("nodes", "chosen", "planning_seconds", "vanilla_predicted_peak",
                                        "predicted_peak", "recompute_fraction", "notes")})
    row["planning_seconds_all"] = sum(r.get("planning_seconds") or 0.0 for r in backend.report)
    row["budget_bytes"] = rep.get("budget")
    row["peak_fraction"] = row["remat_peak"] / row["eager_peak"]
    if args.steps:  # step times, interleaved (``steps.interleave``): median ratios to eager's step
        nets = {"eager": task(copy.deepcopy(model)), "remat": net, **({"torch.compile": peer} if peer else {})}
        times = interleave({k: (lambda n=n: n(**inputs).backward()) for k, n in nets.items()}, repeats=args.steps)
        row["step_seconds"] = {k: statistics.median(v) for k, v in times.items()}
        row["time_ratios"] = time_ratios(times, "eager")
    torch._dynamo.reset()
    return row


def markdown(result: dict) -> str:
    lines = [f"# Planning HF ResNet-152 for inductor (CPU, {result['threads']} threads)", "",
             f"`{result['command']}`", "", f"commit {result['commit']}, torch {result['torch']}", "",
             "| dtype | budget | graph nodes | first call s (torch.compile alone) | planning s | solver | "
             "predicted / budget | measured peak / eager's | within budget | recompute / forward |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        alone = f" ({r['compile_first_call_s']:.0f})" if "compile_first_call_s" in r else ""
        budget = r["budget_bytes"] or 0
        lines.append(f"| {r['dtype']} | {r['budget']} | {r['nodes']} | {r['remat_first_call_s']:.0f}{alone} | "
                     f"{r['planning_seconds_all']:.0f} | {r['chosen']} | {r['predicted_peak'] / budget:.3f} | "
                     f"{r['peak_fraction']:.3f} | {'yes' if r['predicted_peak'] <= budget * 1.01 else 'no'} | "
                     f"{r['recompute_fraction']:.3f} |")
    lines.append("")
    for r in result["rows"]:
        if "time_ratios" in r:
            lines.append(f"{r['dtype']} step time / eager's (median of {result.get('steps')} interleaved rounds): "
                         + ", ".join(f"{k} {v:.3f}" for k, v in r["time_ratios"].items())
                         + "; seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in r["step_seconds"].items()))
    lines.append("")
    for r in result["rows"]:
        lines += [f"{r['dtype']} notes:", *[f"- {n}" for n in r["notes"]],
                  *[f"- warning: {w}" for w in r["warnings"]], ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--budget", default="50%")
    ap.add_argument("--depths", default="3,8,36,3", help="ResNetConfig depths (default: ResNet-152's)")
    ap.add_argument("--widths", default=None, help="ResNetConfig hidden_sizes (default: the config's)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--side", type=int, default=224)
    ap.add_argument("--compile", action="store_true", help="time plain torch.compile's first call too")
    ap.add_argument("--steps", type=int, default=0,
                    help="then time this many interleaved rounds of eager, remat (and with --compile torch.compile)")
    ap.add_argument("--plan-cache", type=Path, default=None,
                    help="remat.backend's plan_cache: run twice with it to time a restarted run's first call")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    args.depths = [int(d) for d in args.depths.split(",")]
    args.widths = [int(w) for w in args.widths.split(",")] if args.widths else None
    here = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                            text=True).stdout.strip()
    result = {"command": "python " + " ".join(["bench/bench_cnn_planning.py", *(argv or sys.argv[1:])]),
              "commit": commit, "torch": torch.__version__, "threads": torch.get_num_threads(),
              "machine": platform.platform(), "steps": args.steps, "rows": []}
    for d in args.dtypes.split(","):
        result["rows"].append(run(d, args))
        print(json.dumps({k: v for k, v in result["rows"][-1].items() if k != "notes"}, default=str), flush=True)
    text = markdown(result)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=1, default=str))
        (args.out / "report.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
