"""Planning only: ``remat.optimize`` (eager, default arguments) on the CPU-size held-out models at "50%" and at the
eager peers' measured peaks, with the partitioner's retried plans refused without seeking the solver's smallest
budget ("new", ``plan_within(named=False)`` as committed) and with it sought for every refusal ("old"). Prints each
plan's solver, recomputation, predicted peak and planning seconds; writes $OUT/plans.json. argv: models."""
import contextlib
import functools
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parent / "selective_chains_cpu")]
from plans_eager import compare  # noqa: E402
from remat import optimize as _  # noqa: E402,F401
import importlib  # noqa: E402

optimize_module = importlib.import_module("remat.optimize")


@contextlib.contextmanager
def old():
    was = optimize_module.plan_within

    @functools.wraps(was)
    def named(*args: Any, **kwargs: Any) -> Any:
        kwargs["named"] = True
        return was(*args, **kwargs)

    optimize_module.plan_within = named
    try:
        yield
    finally:
        optimize_module.plan_within = was


def describe(module: Any) -> dict:
    rep = module.report
    return {"solver": rep.solver, "recompute_s": module.step.planned.prediction.recompute_cost,
            "predicted_peak": rep.predicted_peak}


if __name__ == "__main__":
    compare(sys.argv[1], {"new": contextlib.nullcontext, "old": old}, describe, "plans.json")
