"""Planning only: remat eager (``remat.optimize``, auto, default costs) on the CPU-size held-out models at "50%" and
at the eager peers' measured peaks, with auto's answer one call of auto ("new": ``judge._Search`` treats auto as
answered by its first call, its candidates each searching planning budgets themselves) and with the answer's relaxed
and tightened re-calls of auto ("old"). Prints each plan's solver, recomputation, predicted and profiled recompute
seconds, predicted peak and planning seconds. argv: models (comma list). Writes $OUT/plans.json."""
import contextlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parent / "selective_chains_cpu"),
                str(HERE.parent / "timed_attention_cpu")]
from plans import describe  # noqa: E402
from plans_eager import compare  # noqa: E402
from remat import judge  # noqa: E402


@contextlib.contextmanager
def old():
    """The answer's search re-calls auto as it re-calls any solver (before this change)."""
    was = judge._Search.__init__

    def init(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        was(self, *args, **kwargs)
        self.budget_free = judge.solvers.get(self.name).budget_free

    judge._Search.__init__ = init
    try:
        yield
    finally:
        judge._Search.__init__ = was


def main() -> None:
    compare(sys.argv[1], {"new": contextlib.nullcontext, "old": old}, describe, "plans.json")


if __name__ == "__main__":
    main()
