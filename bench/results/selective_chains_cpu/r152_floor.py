"""HF ResNet-152 (public depths, batch 2, 224 px, fp32, 2 threads): the least budget ``remat.optimize`` (eager code,
auto) meets, as its refusal of "10%" names it, with ``selective-chains`` among auto's candidates ("new") and without
it ("old", ``plans_eager.old``); then the new one's plan at that budget, measured (verify=True).
Writes $OUT/r152_floor.json."""
import json
import os
import re
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench"), str(HERE)]
import remat  # noqa: E402
from bench_cnn_planning import build  # noqa: E402
from plans_eager import old  # noqa: E402
from remat.errors import InfeasibleError  # noqa: E402
from remat.judge import forget_floors  # noqa: E402


def main() -> None:
    torch.set_num_threads(2)
    model, inputs, labels = build([3, 8, 36, 3], 2, 224)
    inputs = {**inputs, "labels": labels}
    row: dict = {}
    for which, ctx in (("new", None), ("old", old)):
        forget_floors()
        t0 = time.perf_counter()
        try:
            if ctx is None:
                remat.optimize(model, inputs, "10%", verify=False)
            else:
                with ctx():
                    remat.optimize(model, inputs, "10%", verify=False)
        except InfeasibleError as e:
            row[which] = {"message": str(e), "needed": int(re.findall(r"(\d+) bytes\)", str(e))[-1]),
                          "seconds": time.perf_counter() - t0}
        print(which, row[which], flush=True)
    forget_floors()
    rep = remat.optimize(model, inputs, row["new"]["needed"]).report
    row["new_at_its_floor"] = {k: getattr(rep, k) for k in ("solver", "predicted_peak", "measured_peak",
                                                            "vanilla_measured_peak", "recompute_fraction")}
    print(row["new_at_its_floor"], flush=True)
    Path(os.environ.get("OUT", "."), "r152_floor.json").write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
