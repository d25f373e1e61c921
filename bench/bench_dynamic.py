"""remat.backend on batches of several shapes (dynamic shapes), against eager.

A language model trained on batches padded to each batch's longest sequence sees a new length
every step, and an epoch's last batch is usually smaller; after the second shape, torch.compile
traces with symbolic sizes. This runs a held-out model (``--model``: HF Llama over sequence
lengths, HF ResNet over batch sizes; ``--size cpu`` is the held-out CPU size) under
``remat.backend(budget="50%")`` with each compiler over a list of sizes and records, per call:
the graphs compiled so far (a recompile would add one), the measured peak against the eager
step's at that size (profiler replay), the planned graph's predicted peak, and the worst
gradient difference from eager.

    python bench/bench_dynamic.py --out bench/results/dynamic_shapes_cpu
    python bench/bench_dynamic.py --model resnet --sizes 8,5,5,3,7,8 --out ...
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
from remat.measure import measure  # noqa: E402


def _call(held: heldout.HeldOut, n: int) -> tuple[dict, torch.Tensor | None]:
    """The model's inputs at sequence length ``n`` (language models) or batch size ``n`` (vision)."""
    torch.manual_seed(n)
    if held.kind == "lm":
        ids = torch.randint(0, held.config["vocab_size"], (held.config["batch"], n))
        return {"input_ids": ids, "labels": ids}, None
    side, (key,) = held.config["image_size"], held.inputs  # (torchvision's argument is x, transformers' pixel_values)
    return {key: torch.randn(n, 3, side, side)}, torch.randint(0, held.config["classes"], (n,))


def run(model_name: str, compiler: str, sizes: list[int], budget: str, size: str = "cpu") -> dict:
    torch._dynamo.reset()
    held = heldout.build(model_name, "cpu", size)
    model = held.model
    ref = copy.deepcopy(model)
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
        rows.append({"size": n, "graphs": len(be.report), "peak": peak, "vanilla_peak": vanilla,
                     "peak_fraction": peak / vanilla, "predicted_peak_of_last_graph": rep["predicted_peak"],
                     "grad_diff": diff, "seconds_incl_compile": seconds,
                     "notes": [x for x in rep["notes"] if x.startswith("dynamic shapes")]})
        print(f"{model_name} {compiler} {n}: graphs {len(be.report)}, peak x{peak / vanilla:.3f} of eager, "
              f"predicted/measured {rep['predicted_peak'] / peak:.3f}, grad diff {diff:.1e}", flush=True)
    torch._dynamo.reset()
    return {"model": model_name, "compiler": compiler, "budget": budget, "source": held.source,
            "varies": "sequence length" if held.kind == "lm" else "batch size", "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="llama", choices=heldout.MODELS)
    ap.add_argument("--size", default="cpu", choices=heldout.SIZES)
    ap.add_argument("--sizes", default="128,96,96,64,112,128", help="sequence lengths, or batch sizes (vision)")
    ap.add_argument("--compilers", default="eager,inductor")
    ap.add_argument("--budget", default="50%")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    sizes = [int(x) for x in args.sizes.split(",")]
    result = {"command": " ".join(["python", *sys.argv]), "torch": torch.__version__,
              "platform": platform.platform(), "threads": torch.get_num_threads(),
              "runs": [run(args.model, c, sizes, args.budget, args.size) for c in args.compilers.split(",")]}
    args.out.mkdir(parents=True, exist_ok=True)
    name = "results.json" if args.model == "llama" else f"results_{args.model}.json"
    (args.out / name).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
