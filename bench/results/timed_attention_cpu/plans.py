"""Planning only: remat eager (``remat.optimize``, auto, default costs: the roofline on the CPU) on the CPU-size
held-out models at "50%" and at the eager peers' measured peaks of ``compiled_cpu/eager_all_calibrated_b1ec090``, with
fused attention and layer norms timed on the device like convolutions ("new": a change tried, not committed) and
priced by the roofline ("old": ``costs.TIMED`` as committed). Prints each plan's solver, recomputation (a fraction of
a forward, in its own costs), predicted recompute seconds, the same ops' ``cost="profile"`` seconds and the predicted
peak. argv: models (comma list). Writes $OUT/plans.json."""
import contextlib
import functools
import sys
from unittest import mock
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parent / "selective_chains_cpu")]
from plans_eager import compare  # noqa: E402
from remat.compiled import costs  # noqa: E402

TRIED = costs.TIMED | {"native_layer_norm", *costs._ATTENTION}
new = functools.partial(mock.patch.object, costs, "TIMED", TRIED)  # (a context per plan)


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


def describe(module: Any) -> dict:
    """A plan's solver, recomputation (fraction of a forward), predicted and profiled recompute seconds, peak."""
    rep, planned = module.report, module.step.planned
    return {"solver": rep.solver, "recompute_fraction": round(rep.recompute_fraction, 4),
            "predicted_recompute_s": planned.prediction.recompute_cost,
            "profiled_recompute_s": recompute_seconds(planned), "predicted_peak": rep.predicted_peak}


def main() -> None:
    compare(sys.argv[1], {"new": new, "old": contextlib.nullcontext}, describe, "plans.json")


if __name__ == "__main__":
    main()
