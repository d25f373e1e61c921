"""Planning only: remat eager (``remat.optimize``, auto, default costs) on the CPU-size held-out models at "50%" and
at the eager peers' measured peaks, as committed ("new": auto's re-plans within lower planning budgets take only the
shortlisted candidates within ``partitioner.SHORTLIST_WITHIN`` of the cheapest, and eager code over the budget by at
most ``BELOW_FIRST`` is planned within less before the code-judged search), with each change alone ("shortlist",
"below-first") and with neither ("old"). Prints each plan's solver, recomputation (a fraction of a forward, in its
own costs), predicted recompute seconds, the same ops' ``cost="profile"`` seconds, the predicted peak and the planning
seconds. argv: models (comma list). Writes $OUT/plans.json."""
import contextlib
import functools
import math
import sys
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parent / "selective_chains_cpu"),
                str(HERE.parent / "timed_attention_cpu")]
from plans import describe  # noqa: E402
from plans_eager import compare  # noqa: E402
from remat.compiled import partitioner  # noqa: E402

wide = functools.partial(mock.patch.object, partitioner, "SHORTLIST_WITHIN", math.inf)  # the shortlist before
judged_first = functools.partial(mock.patch.object, partitioner, "BELOW_FIRST", 0.0)  # the judged search first


@contextlib.contextmanager
def old():
    with wide(), judged_first():
        yield


def main() -> None:
    compare(sys.argv[1], {"new": contextlib.nullcontext, "shortlist": judged_first, "below-first": wide, "old": old},
            describe, "plans.json")


if __name__ == "__main__":
    main()
