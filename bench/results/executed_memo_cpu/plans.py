"""Planning only: ``remat.optimize`` (eager, default arguments) on the CPU-size held-out models at "50%" and at the
eager peers' measured peaks, with ``selective.executed`` remembering each graph's kept sets ("new", as committed)
and without (``EXECUTED_STEPS = 0``: "old"). Prints each plan's solver, recomputation, predicted peak and planning
seconds; writes $OUT/plans.json. argv: models (comma list)."""
import contextlib
import functools
import sys
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parent / "selective_chains_cpu")]
from plans_eager import compare, describe_recompute  # noqa: E402
from remat.solvers import selective  # noqa: E402

old = functools.partial(mock.patch.object, selective, "EXECUTED_STEPS", 0)  # (a context per plan)

if __name__ == "__main__":
    compare(sys.argv[1], {"new": contextlib.nullcontext, "old": old}, describe_recompute, "plans.json")
