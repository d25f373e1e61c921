"""Planning only: remat eager (``remat.optimize``, auto, default costs) on the CPU-size held-out models at "50%" and at
the eager peers' measured peaks, with the eager code's judged search also started from ``selective-chains``' and
``selective``'s own plans ("new": ``partitioner.CODE_SEEDS``) and from auto's choice and per-block checkpointing's
floor only ("old"). Prints each plan's solver, recomputation (a fraction of a forward, in its own costs), predicted
recompute seconds, the same ops' ``cost="profile"`` seconds, the predicted peak and the planning seconds.
argv: models (comma list). Writes $OUT/plans.json."""
import contextlib
import functools
import sys
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parent / "selective_chains_cpu"),
                str(HERE.parent / "timed_attention_cpu")]
from plans import describe  # noqa: E402
from plans_eager import compare  # noqa: E402
from remat.compiled import partitioner  # noqa: E402


def main() -> None:
    old = functools.partial(mock.patch.object, partitioner, "CODE_SEEDS", ())
    compare(sys.argv[1], {"new": contextlib.nullcontext, "old": old}, describe, "plans.json")


if __name__ == "__main__":
    main()
