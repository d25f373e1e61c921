"""Planning only: remat eager (``remat.optimize``, auto, default costs: the roofline on the CPU) on the CPU-size
held-out models at "50%" and at the eager peers' measured peaks of ``compiled_cpu/eager_all_calibrated_b1ec090``, with
fused attention and layer norms timed on the device like convolutions ("new": a change tried, not committed) and
priced by the roofline ("old": ``costs.TIMED`` as committed). Prints each plan's solver, recomputation (a fraction of
a forward, in its own costs), predicted recompute seconds, the same ops' ``cost="profile"`` seconds and the predicted
peak. argv: models (comma list). Writes $OUT/plans.json."""
import contextlib
import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "src"))
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.compiled import costs  # noqa: E402
from remat.judge import forget_floors  # noqa: E402

PEERS = ROOT / "bench/results/compiled_cpu/eager_all_calibrated_b1ec090/results.json"
TRIED = costs.TIMED | {"native_layer_norm", *costs._ATTENTION}


@contextlib.contextmanager
def new():
    was, costs.TIMED = costs.TIMED, TRIED
    try:
        yield
    finally:
        costs.TIMED = was


def recompute_seconds(planned) -> float:  # noqa: ANN001 -- partitioner.Planned
    """The plan's recomputed forward ops, each at its ``cost="profile"`` time (the same op cache)."""
    seen, again = set(), []
    for kind, v in planned.steps:
        if kind == "fwd":
            if v in seen:
                again.append(planned.joint.node_of.get(v))
            seen.add(v)
    again = [n for n in again if n is not None]
    return sum(costs.profile(again).values())


def main() -> None:
    torch.set_num_threads(1)
    rows = json.loads(PEERS.read_text())["rows"]
    out = []
    for name in sys.argv[1].split(","):
        held = heldout.build(name, "cpu", "cpu")
        for dtype in ("fp32", "bf16"):
            peaks = {r["method"]: r["peak"] for r in rows if r["model"] == name and r["dtype"] == dtype}
            budgets = [("50%", "50%"), *((f"@{m}", int(peaks[m])) for m in ("per-block checkpoint", "sac-matmul"))]
            for label, budget in budgets:
                row = {"model": name, "dtype": dtype, "budget": label}
                for which, ctx in (("new", new), ("old", contextlib.nullcontext)):
                    forget_floors()
                    with ctx(), heldout.autocast("cpu", torch.bfloat16 if dtype == "bf16" else None):
                        mod = remat.optimize(held.model, held.inputs, budget, verify=False,
                                             **({} if label == "50%" else {"tolerance": 0.0}))
                    rep, planned = mod.report, mod.step.planned
                    row[which] = {"solver": rep.solver, "recompute_fraction": round(rep.recompute_fraction, 4),
                                  "predicted_recompute_s": planned.prediction.recompute_cost,
                                  "profiled_recompute_s": recompute_seconds(planned),
                                  "predicted_peak": rep.predicted_peak}
                print(json.dumps(row), flush=True)
                out.append(row)
    Path(os.environ.get("OUT", "."), "plans.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
