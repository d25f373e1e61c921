"""remat.backend on batches of several sequence lengths (dynamic shapes), against eager.

A language model trained on batches padded to each batch's longest sequence sees a new length
every step; after the second, torch.compile traces with symbolic sizes. This runs HF Llama (the
held-out CPU size: 4 layers, hidden 128, batch 4) under ``remat.backend(budget="50%")`` with each
compiler over a sequence of lengths and records, per call: the graphs compiled so far (a
recompile would add one), the measured peak against the eager step's at that length (profiler
replay), the planned graph's predicted peak, and the worst gradient difference from eager.

    python bench/bench_dynamic.py --out bench/results/dynamic_shapes_cpu
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


def _inputs(seq: int, vocab: int, batch: int) -> dict:
    torch.manual_seed(seq)
    ids = torch.randint(0, vocab, (batch, seq))
    return {"input_ids": ids, "labels": ids}


def run(compiler: str, lengths: list[int], budget: str) -> dict:
    torch._dynamo.reset()
    held = heldout.build("llama", "cpu", "cpu")
    model, vocab, batch = held.model, held.config["vocab_size"], held.config["batch"]
    ref = copy.deepcopy(model)
    be = remat.backend(budget=budget, solver="auto", compiler=compiler)
    step = heldout.Task(torch.compile(model, backend=be), "lm")
    eager = heldout.Task(ref, "lm")
    rows = []
    for seq in lengths:
        inputs = _inputs(seq, vocab, batch)
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
        rows.append({"seq": seq, "graphs": len(be.report), "peak": peak, "vanilla_peak": vanilla,
                     "peak_fraction": peak / vanilla, "predicted_peak_of_last_graph": rep["predicted_peak"],
                     "grad_diff": diff, "seconds_incl_compile": seconds,
                     "notes": [n for n in rep["notes"] if n.startswith("dynamic shapes")]})
        print(f"{compiler} seq {seq}: graphs {len(be.report)}, peak x{peak / vanilla:.3f} of eager, "
              f"predicted/measured {rep['predicted_peak'] / peak:.3f}, grad diff {diff:.1e}", flush=True)
    torch._dynamo.reset()
    return {"compiler": compiler, "budget": budget, "model": held.source, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--lengths", default="128,96,96,64,112,128")
    ap.add_argument("--compilers", default="eager,inductor")
    ap.add_argument("--budget", default="50%")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    lengths = [int(x) for x in args.lengths.split(",")]
    result = {"command": " ".join(["python", *sys.argv]), "torch": torch.__version__,
              "platform": platform.platform(), "threads": torch.get_num_threads(),
              "runs": [run(c, lengths, args.budget) for c in args.compilers.split(",")]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
