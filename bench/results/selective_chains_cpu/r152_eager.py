"""HF ResNet-152 (public depths, batch 2, 224 px, fp32, 2 threads), remat eager (``remat.optimize``, auto) at a
budget, with ``selective-chains`` among auto's candidates ("new", as committed) and without it ("old",
``plans_eager.old``): each plan's report (verify=True: measured peak) and then vanilla, new and old steps interleaved.
argv: budget (default "50%"), rounds (default 10). Writes $OUT/r152_eager_<budget>.json."""
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench"), str(ROOT / "bench" / "gpu_probe"), str(HERE)]
import remat  # noqa: E402
from bench_cnn_planning import build  # noqa: E402
from overhead import interleaved  # noqa: E402
from plans_eager import old  # noqa: E402
from remat.judge import forget_floors  # noqa: E402

KEYS = ("solver", "predicted_peak", "measured_peak", "vanilla_measured_peak", "recompute_fraction",
        "planning_seconds", "notes")


def main() -> None:
    torch.set_num_threads(2)
    budget = sys.argv[1] if len(sys.argv) > 1 else "50%"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    model, inputs, labels = build([3, 8, 36, 3], 2, 224)
    inputs = {**inputs, "labels": labels}
    nets, rows = {"vanilla": copy.deepcopy(model)}, {}
    for label, ctx in (("new", None), ("old", old)):
        forget_floors()
        t0 = time.perf_counter()
        if ctx is None:
            nets[label] = remat.optimize(copy.deepcopy(model), inputs, budget)
        else:
            with ctx():
                nets[label] = remat.optimize(copy.deepcopy(model), inputs, budget)
        rep = nets[label].report
        rows[label] = {k: getattr(rep, k, None) for k in KEYS}
        rows[label]["optimize_seconds"] = time.perf_counter() - t0
        print(label, rows[label], flush=True)
    steps = {k: (lambda n=n: n(**inputs).loss.backward()) for k, n in nets.items()}
    for s in steps.values():
        s()
    t = interleaved(steps, rounds, lambda: None)
    for k, v in t.items():
        rows.setdefault(k, {})["ms"] = statistics.median(v)
        rows[k]["of_vanilla_round_by_round"] = statistics.median([a / b for a, b in zip(v, t["vanilla"])])
        print(k, rows[k]["ms"], rows[k]["of_vanilla_round_by_round"], flush=True)
    out = Path(os.environ.get("OUT", ".")) / f"r152_eager_{budget.rstrip('%')}.json"
    out.write_text(json.dumps({"budget": budget, "rounds": rounds, "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
