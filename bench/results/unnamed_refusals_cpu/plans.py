"""Planning only: ``remat.optimize`` (eager, default arguments) on the CPU-size held-out models at "50%" and at the
eager peers' measured peaks, with the partitioner's retried plans refused without seeking the solver's smallest
budget ("new", ``plan_within(named=False)`` as committed) and with it sought for every refusal ("old"). Prints each
plan's solver, recomputation, predicted peak and planning seconds; writes $OUT/plans.json. argv: models."""
import contextlib
import functools
import importlib
import sys
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parent / "selective_chains_cpu")]
from plans_eager import compare, describe_recompute  # noqa: E402

optimize_module = importlib.import_module("remat.optimize")  # (``remat.optimize`` the name is the function)
plan_within = optimize_module.plan_within


def named(*args: Any, **kwargs: Any) -> Any:
    """``plan_within`` as before: every refusal names the smallest budget (a floor search)."""
    return plan_within(*args, **{**kwargs, "named": True})


old = functools.partial(mock.patch.object, optimize_module, "plan_within", named)  # (a context per plan)

if __name__ == "__main__":
    compare(sys.argv[1], {"new": contextlib.nullcontext, "old": old}, describe_recompute, "plans.json")
