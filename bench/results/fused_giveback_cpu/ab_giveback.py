"""Same-process A/B: remat inductor at 50% of the vanilla peak where the solvers' plans only fit after a re-plan
down to the planning graph's floor. new: the fused search also runs from that fitting plan and gives back what the
fused code has room for; old: the floor plan as it is (that search, the one run with GIVE_BACK_SECONDS, stood in for
by "nothing found" while the old build plans). Interleaved with torch.compile b=1 (``bench/ab_inductor.py``)."""
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_inductor import at_half_vanilla  # noqa: E402

from remat.compiled import partitioner  # noqa: E402


@contextlib.contextmanager
def old():
    judged = partitioner.Planner._judged_selective

    def before_give_back(self, *args, **kwargs):
        return None if kwargs.get("seconds") == partitioner.GIVE_BACK_SECONDS else judged(self, *args, **kwargs)

    partitioner.Planner._judged_selective = before_give_back
    try:
        yield
    finally:
        partitioner.Planner._judged_selective = judged


at_half_vanilla(sys.argv, {"old": old})
