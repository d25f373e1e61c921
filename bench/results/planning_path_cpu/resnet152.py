"""Planning HF ResNet-152 for remat eager (``ResNetConfig(depths=[3, 8, 36, 3])``, 224 px, batch 2, two threads,
default arguments) at "50%" under ``plans.py``'s four variants, each after the floors cache is cleared: the chosen
solver, recomputation (a fraction of a forward, in its own costs), predicted peak, the code's notes and the planning
seconds; then the measured peak (allocator level) of the "new" plan. argv: dtype (fp32 | bf16)[, budget]. Writes
$OUT/resnet152_DTYPE.json."""
import contextlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parents[1])]
import importlib.util  # noqa: E402

import torch  # noqa: E402
from bench_cnn_planning import build  # noqa: E402

_spec = importlib.util.spec_from_file_location("path_plans", HERE / "plans.py")  # (its own ``plans`` imports another)
variants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(variants)

import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.judge import forget_floors  # noqa: E402


def main() -> None:
    dtype = sys.argv[1]
    budget = sys.argv[2] if len(sys.argv) > 2 else "50%"
    torch.set_num_threads(2)
    model, inputs, _ = build([3, 8, 36, 3], 2, 224)
    autocast = torch.bfloat16 if dtype == "bf16" else None
    rows, modules = {}, {}
    for label, ctx in {"new": contextlib.nullcontext, "shortlist": variants.judged_first,
                       "below-first": variants.wide, "old": variants.old}.items():
        forget_floors()
        started = time.perf_counter()
        with ctx(), heldout.autocast("cpu", autocast):
            module = remat.optimize(model, inputs, budget, verify=False)
        rep = module.report
        rows[label] = {"seconds": round(time.perf_counter() - started, 1), "solver": rep.solver,
                       "recompute_fraction": round(rep.recompute_fraction, 4), "predicted_peak": rep.predicted_peak,
                       "notes": list(rep.notes)}
        modules[label] = module
        print(label, json.dumps(rows[label]), flush=True)
    with heldout.autocast("cpu", autocast):
        rows["new"]["measured_peak"] = remat.measure(modules["new"], inputs, method="profiler").peak
    print("new measured", rows["new"]["measured_peak"], flush=True)
    out = Path(os.environ.get("OUT", ".")) / f"resnet152_{dtype}.json"
    out.write_text(json.dumps({"dtype": dtype, "budget": budget, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
