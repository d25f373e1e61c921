"""Breadth: 71 transformers architectures nobody here wrote, from small public configs with their
defaults, planned by ``remat.optimize`` within a budget, gradients compared with eager's.

    .venv/bin/python bench/bench_architectures.py --out bench/results/architectures_cpu
    .venv/bin/python bench/bench_architectures.py --models swin --dtypes fp32 --out /tmp/arch   # smoke

For each model (``remat.bench.architectures``: LMs, encoders, encoder-decoders, mixtures of
experts, shared layers, a state-space model, ViTs, windowed attention, CNNs with BatchNorm and
depthwise convolutions) and dtype (fp32, bf16 autocast on the CPU): ``remat.optimize(model, inputs,
budget)``, on a refusal again within the budget it names; one step of the plan and one of an
eager copy from the same RNG state. Reported: gradients and loss ``torch.equal`` to eager's, the
measured peak (allocator level) as a fraction of vanilla's, per-block checkpointing's (the
library's, else residual blocks wrapped), the solver, recomputation (a fraction of a forward,
roofline costs) and planning seconds.

Writes OUT/results.json (after every model), OUT/table.md and OUT/COMMANDS.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from remat.bench.architectures import ARCHITECTURES, check, check_compiled  # noqa: E402
from remat.machine import provenance  # noqa: E402


def table(rows: list[dict[str, Any]]) -> str:
    """One markdown row per model and dtype."""
    lines = ["| model | dtype | grads = eager | peak (of vanilla) | per-block ckpt | solver | recompute | "
             "plan s | note |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['dtype']} | | | | | | | error: {r['error'][:120]} |")
            continue
        notes = [f"refused {r['budget']}, ran within the budget named"] if "refused" in r else []
        if any("torch.compile traces it" in n for n in r.get("notes", ())):
            notes.append("traced as torch.compile traces it")
        note = "; ".join(notes)
        block = f"{r['per_block_fraction']:.3f}" if "per_block_fraction" in r else "none"
        same = "yes" if r["grads_equal"] and r["loss_equal"] else "NO"
        if "grad_diff" in r:
            same += f" ({r['grad_diff']:.1e})"
        lines.append(f"| {r['model']} | {r['dtype']} | {same} | "
                     f"{r['peak_fraction']:.3f} | {block} | {r['solver']} | {r['recompute_fraction']:.3f} | "
                     f"{r['plan_seconds']:.1f} | {note} |")
    return "\n".join(lines) + "\n"


def compiled_table(rows: list[dict[str, Any]]) -> str:
    """``--compiler inductor``: one markdown row per model and dtype."""
    lines = ["| model | dtype | peak (of vanilla) | budget (of vanilla) | within budget | predicted / measured | "
             "torch.compile peak | grad diff remat / torch.compile (eager / fp64) | solver | first step s remat / torch.compile | "
             "note |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['dtype']} | | | | | | | | | error: {r['error'][:120]} |")
            continue
        notes = ["refused, ran within the budget named"] if "refused" in r else []
        if r.get("eager_rng"):
            notes.append("gradients with eager's dropout masks (fallback_random)")
        if not grads_as_close(r):
            notes.append("gradients further from eager's than torch.compile's")
        note = "; ".join(notes)
        grads = f"{r['grad_diff']:.1e} / {r['compile_grad_diff']:.1e}"
        if "eager_grad_err" in r:
            grads += f" ({r['eager_grad_err']:.0e})"
        lines.append(f"| {r['model']} | {r['dtype']} | {r['peak_fraction']:.3f} | {r['budget'] / r['vanilla_peak']:.3f} | "
                     f"{'yes' if r['within_budget'] else 'NO'} | {r['predicted_peak'] / r['peak']:.4f} | "
                     f"{r['compile_peak_fraction']:.3f} | {grads} | "
                     f"{r['solver']} | {_first_steps(r)} | {note} |")
    return "\n".join(lines) + "\n"


def grads_as_close(r: dict[str, Any]) -> bool:
    """Remat's gradients differ from eager's by at most twice torch.compile's difference, or twice
    eager's own error against a float64 step (where eager itself is that far off, a difference
    from it says nothing about remat: LeViT's batch norms over two images)."""
    return r["grad_diff"] <= max(2 * r["compile_grad_diff"], 2 * r.get("eager_grad_err", 0.0), 1e-5)


def _first_steps(r: dict[str, Any]) -> str:
    """Seconds of remat's and torch.compile's first steps (tracing, planning, compiling), or of remat's
    whole row where they were not recorded."""
    if "first_step_seconds" not in r:
        return f"{r['seconds']:.1f} (row)"
    return f"{r['first_step_seconds']:.1f} / {r['compile_first_step_seconds']:.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(ARCHITECTURES))
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--budget", default="50%")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "architectures_cpu"))
    p.add_argument("--compiler", choices=("eager", "inductor"), default="eager",
                   help="eager: remat.optimize, gradients bit for bit; inductor: torch.compile with "
                        "remat.backend at the budget's share of the measured eager peak, beside torch.compile")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "PYTHONPATH=src .venv/bin/python bench/bench_architectures.py " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    result: dict[str, Any] = {**provenance(), "command": command, "budget": args.budget, "rows": []}
    warnings.simplefilter("ignore")  # transformers' deprecations; remat's own notes are in each report
    for name in args.models.split(","):
        for dtype in args.dtypes.split(","):
            started = time.perf_counter()
            try:
                row = (check(name, args.budget, dtype) if args.compiler == "eager" else
                       check_compiled(name, float(args.budget.rstrip("%")) / 100, dtype))
            except Exception as e:  # noqa: BLE001 - one model's failure is reported, the others still run
                row = {"model": name, "dtype": dtype, "error": f"{type(e).__name__}: {e}",
                       "traceback": traceback.format_exc(limit=4)}
            row["wall_seconds"] = time.perf_counter() - started
            result["rows"].append(row)
            render = table if args.compiler == "eager" else compiled_table
            print(render([row]).splitlines()[-1], flush=True)
            (out / "results.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(render(result["rows"]))
    (out / "COMMANDS.md").write_text(f"```\n{command}\n```\n")
    if args.compiler == "inductor":  # as close to eager as torch.compile's own gradients, within budget
        failed = [r for r in result["rows"] if "error" in r or not r["within_budget"]
                  or not grads_as_close(r)]
    else:
        failed = [r for r in result["rows"] if "error" in r or not (r["grads_equal"] and r["loss_equal"])]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
