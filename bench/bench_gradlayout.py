"""Gradients in their parameters' layout (``remat.compiled.gradlayout``): measured peaks with and without.

A convolution that reads a channels-last input returns its weight's gradient channels-last; eager
autograd copies it into the parameter's layout as soon as it is made, AOTAutograd's backward returns
it at its end. remat's eager code copies it where it is made (``gradlayout``). For each budget this
plans an architectures-benchmark model (default: HF ConvNeXt V2 from a small config, fp32, CPU) with
the copies and without them, and measures the step (profiler replay, parameter gradients excluded):
the plan's predicted peak, the measured one, the gradients copied, gradient equality with eager, and
per-block checkpointing's measured peak beside them.

    python bench/bench_gradlayout.py --out bench/results/gradlayout_cpu
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import subprocess
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import remat  # noqa: E402
from remat.bench import architectures  # noqa: E402
from remat.compiled import gradlayout, partitioner  # noqa: E402
from remat.measure import measure  # noqa: E402

# (budget, solver): a fixed solver at 60% (the same plan both ways), then auto down to its least
CASES = (("100%", "auto"), ("60%", "chen-greedy"), ("70%", "auto"), ("least", "auto"))


def _restrided(module: torch.nn.Module) -> int:
    """Gradients the generated backward returns with strides other than their parameter's (each one
    lives to the end of the backward before autograd copies it; ``gradlayout`` leaves none)."""
    split = module.step.planned.split
    return len(gradlayout.restrided(split.forward, split.backward))


def _grads_equal(module: torch.nn.Module, ref: torch.nn.Module, inputs: dict) -> bool:
    for net in (module, ref):
        net.zero_grad(set_to_none=True)
        net(**inputs).loss.backward()
    return all((p.grad is None and q.grad is None) or (p.grad is not None and q.grad is not None
               and torch.equal(p.grad, q.grad) and p.grad.stride() == q.grad.stride())
               for p, q in zip(module.parameters(), ref.parameters()))


def one(model: torch.nn.Module, inputs: dict, budget: str, solver: str, copies: bool) -> dict:
    """Plan ``model`` within ``budget`` (``"least"``: the least budget auto names) with or without the
    copies; measure its step."""
    loss = lambda out: out.loss  # noqa: E731
    was = partitioner.grads_as_parameters
    if not copies:
        partitioner.grads_as_parameters = lambda *a: 0
    try:
        if budget == "least":
            try:
                remat.optimize(copy.deepcopy(model), inputs, "5%", solver=solver, verify=False)
            except remat.InfeasibleError as e:
                budget = e.needed
        module = remat.optimize(copy.deepcopy(model), inputs, budget, solver=solver, verify=False)
    finally:
        partitioner.grads_as_parameters = was
    planned = module.step.planned
    return {"budget": budget, "solver": solver, "copies": copies,
            "chosen": planned.plan.stats.get("chosen") or planned.plan.solver,
            "restrided_gradients": _restrided(module), "predicted_peak": round(planned.peak),
            "measured_peak": measure(module, inputs, method="profiler", loss_fn=loss).peak,
            "grads_equal": _grads_equal(module, copy.deepcopy(model), inputs)}


def run(name: str) -> dict:
    """Every case of ``CASES`` both ways on architectures' ``name``, with eager's and per-block's peaks."""
    model, inputs, _ = architectures.build(name)
    vanilla = measure(copy.deepcopy(model), inputs, method="profiler", loss_fn=lambda out: out.loss).peak
    block = architectures._per_block(name, model, inputs, "fp32")
    rows = []
    for budget, solver in CASES:
        for copies in (True, False):
            row = one(model, inputs, budget, solver, copies)
            row["fraction"] = row["measured_peak"] / vanilla
            rows.append(row)
            print(f"{name} {budget} {solver} copies={copies}: predicted {row['predicted_peak']}, measured "
                  f"{row['measured_peak']} ({row['fraction']:.3f}), {row['restrided_gradients']} gradients restrided",
                  flush=True)
    return {"model": name, "vanilla_peak": vanilla, "per_block_peak": block,
            "per_block_fraction": None if block is None else block / vanilla, "rows": rows}


def _report(result: dict) -> str:
    lines = [f"`{result['command']}` (torch {result['torch']}, {result['threads']} threads, commit {result['commit']})",
             "", "| model | budget | solver | copies | restrided gradients | chosen | predicted | measured "
             "| of vanilla | grads equal |", "| --- " * 10 + "|"]
    for m in result["models"]:
        for r in m["rows"]:
            cells = (m["model"], r["budget"], r["solver"], "on" if r["copies"] else "off", r["restrided_gradients"],
                     r["chosen"], f"{r['predicted_peak']:,}", f"{r['measured_peak']:,}", f"{r['fraction']:.3f}",
                     "yes" if r["grads_equal"] else "no")
            lines.append("| " + " | ".join(map(str, cells)) + " |")
        if m["per_block_peak"] is not None:
            lines.append(f"\n{m['model']}: vanilla {m['vanilla_peak']:,} bytes; per-block checkpointing "
                         f"{m['per_block_peak']:,.0f} ({m['per_block_fraction']:.3f})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="convnextv2")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    given = sys.argv[1:] if argv is None else argv
    result = {"command": " ".join(["python", "bench/bench_gradlayout.py", *given]),
              "commit": commit, "torch": torch.__version__, "platform": platform.platform(),
              "threads": torch.get_num_threads(), "models": [run(m) for m in args.models.split(",")]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=1))
    (args.out / "report.md").write_text(_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
