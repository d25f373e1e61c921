"""remat.backend on batches of several shapes (dynamic shapes), against eager.

A language model trained on batches padded to each batch's longest sequence sees a new length
every step, and an epoch's last batch is usually smaller; after the second shape, torch.compile
traces with symbolic sizes. This runs a held-out model (``--model``: HF Llama over sequence
lengths, HF ResNet over batch sizes; ``--size cpu`` is the held-out CPU size) under
``remat.backend(budget=...)`` with each compiler over a list of sizes and records, per call:
the graphs compiled so far (a recompile would add one), the measured peak against the eager
step's at that size (profiler replay), the planned graph's predicted peak, and the worst
gradient difference from eager. ``--budget`` is a percentage or bytes; ``--of-largest F``
makes it F times the eager step's peak at the largest size (a byte budget: held at every size).
``--steps N`` also times eager, per-block checkpointing (the library's own) and remat at each
size, N rounds interleaved, and measures per-block checkpointing's peak.

    python bench/bench_dynamic.py --out bench/results/dynamic_shapes_cpu
    python bench/bench_dynamic.py --model resnet --sizes 8,5,5,3,7,8 --out ...
    python bench/bench_dynamic.py --of-largest 0.5 --sizes 96,80,128,64,112,48 --steps 5 --out ...
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
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


def _call(held: heldout.HeldOut, n: int) -> tuple[dict, torch.Tensor | None]:
    """The model's inputs at sequence length ``n`` (language models) or batch size ``n`` (vision)."""
    torch.manual_seed(n)
    if held.kind == "lm":
        ids = torch.randint(0, held.config["vocab_size"], (held.config["batch"], n))
        return {"input_ids": ids, "labels": ids}, None
    side, (key,) = held.config["image_size"], held.inputs  # (torchvision's argument is x, transformers' pixel_values)
    return {key: torch.randn(n, 3, side, side)}, torch.randint(0, held.config["classes"], (n,))


def run(model_name: str, compiler: str, sizes: list[int], budget: object, size: str = "cpu", steps: int = 0) -> dict:
    torch._dynamo.reset()
    held = heldout.build(model_name, "cpu", size)
    model = held.model
    ref = copy.deepcopy(model)
    blocks, how = heldout.per_block(held) if steps else (None, None)
    be = remat.backend(budget=budget, solver="auto", compiler=compiler)
    compiled = torch.compile(model, backend=be)
    rows = []
    for n in sizes:
        inputs, labels = _call(held, n)
        step, eager = heldout.Task(compiled, held.kind, labels), heldout.Task(ref, held.kind, labels)
        t0 = time.perf_counter()
        peak = measure(step, inputs, method="profiler").peak
        seconds = time.perf_counter() - t0
        vanilla = measure(copy.deepcopy(eager), inputs, method="profiler").peak
        for m in (model, ref):
            m.zero_grad(set_to_none=True)
        step(**inputs).backward()
        eager(**inputs).backward()
        diff = heldout.grad_difference([p.grad for p in model.parameters()], [p.grad for p in ref.parameters()])
        rep = be.report[-1]
        row = {"size": n, "graphs": len(be.report), "peak": peak, "vanilla_peak": vanilla,
               "peak_fraction": peak / vanilla, "predicted_peak_of_last_graph": rep["predicted_peak"],
               "grad_diff": diff, "seconds_incl_compile": seconds,
               "notes": [x for x in rep["notes"] if x.startswith("dynamic shapes")]}
        if isinstance(budget, float):
            row["budget_fraction"] = peak / budget
        line = ""
        if steps:
            peer = heldout.Task(blocks, held.kind, labels)
            row["per_block_peak"] = measure(peer, inputs, method="profiler").peak
            row["per_block_fraction"] = row["per_block_peak"] / vanilla
            timed = {name: _train_step(task, inputs) for name, task in
                     (("eager", eager), ("per-block", peer), ("remat", step))}
            times = interleave(timed, repeats=steps)
            row["time_ratio"] = time_ratios(times, "eager")
            row["step_ms"] = {k: 1e3 * sorted(v)[len(v) // 2] for k, v in times.items()}
            line = (f", per-block x{row['per_block_fraction']:.3f}; time remat x{row['time_ratio']['remat']:.3f}, "
                    f"per-block x{row['time_ratio']['per-block']:.3f}")
        rows.append(row)
        print(f"{model_name} {compiler} {n}: graphs {len(be.report)}, peak x{peak / vanilla:.3f} of eager"
              + (f" ({peak / budget:.3f} of the budget)" if isinstance(budget, float) else "")
              + f", predicted/measured {rep['predicted_peak'] / peak:.3f}, grad diff {diff:.1e}{line}", flush=True)
    torch._dynamo.reset()
    return {"model": model_name, "compiler": compiler, "budget": budget, "source": held.source,
            "per_block": how, "varies": "sequence length" if held.kind == "lm" else "batch size", "rows": rows}


def of_largest(model_name: str, size: str, sizes: list[int], fraction: float) -> float:
    """``fraction`` of the eager step's measured peak at the largest of ``sizes`` (bytes)."""
    held = heldout.build(model_name, "cpu", size)
    inputs, labels = _call(held, max(sizes))
    return fraction * measure(heldout.Task(held.model, held.kind, labels), inputs, method="profiler").peak


def _train_step(task: torch.nn.Module, inputs: dict):
    def step() -> None:
        task(**inputs).backward()
        for p in task.parameters():
            p.grad = None
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="llama", choices=heldout.MODELS)
    ap.add_argument("--size", default="cpu", choices=heldout.SIZES)
    ap.add_argument("--sizes", default="128,96,96,64,112,128", help="sequence lengths, or batch sizes (vision)")
    ap.add_argument("--compilers", default="eager,inductor")
    ap.add_argument("--budget", default="50%", help="a percentage, or bytes (\"24MiB\")")
    ap.add_argument("--of-largest", type=float, default=None,
                    help="budget = this fraction of the eager step's peak at the largest size (bytes)")
    ap.add_argument("--steps", type=int, default=0, help="timed rounds per size (0: no timing, no peer)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    sizes = [int(x) for x in args.sizes.split(",")]
    budget: object = args.budget
    if args.of_largest is not None:
        budget = of_largest(args.model, args.size, sizes, args.of_largest)
        print(f"budget: {args.of_largest} of the eager step's peak at {max(sizes)}: {budget:.0f} bytes", flush=True)
    result = {"command": " ".join(["python", *sys.argv]), "torch": torch.__version__,
              "platform": platform.platform(), "threads": torch.get_num_threads(), "budget": budget,
              "runs": [run(args.model, c, sizes, budget, args.size, args.steps) for c in args.compilers.split(",")]}
    args.out.mkdir(parents=True, exist_ok=True)
    name = "results.json" if args.model == "llama" else f"results_{args.model}.json"
    name = name.replace(".json", "_bytes.json") if isinstance(budget, float) else name
    (args.out / name).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
