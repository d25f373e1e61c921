"""Planning only: remat eager (``remat.optimize``, auto, default costs) on the CPU-size held-out models at "50%" and
at the eager peers' measured peaks, with timed ops read cold ("new", as committed) and warm ("old": no eviction
before each timed run, on an op cache of its own). Each plan's recomputed ops are then priced alike, by
``cost="profile"`` as committed (cold), in ``profiled_recompute_s``. argv: models (comma list). Writes $OUT/plans.json."""
import contextlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parents[1]), str(HERE.parent / "selective_chains_cpu"),
                str(HERE.parent / "timed_attention_cpu")]
import importlib.util  # noqa: E402

from plans import describe  # noqa: E402
from plans_eager import compare  # noqa: E402

_spec = importlib.util.spec_from_file_location("cold_ab", HERE / "ab_eager.py")  # (another ab_eager is on the path)
_ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ab)
old = _ab.old

if __name__ == "__main__":
    compare(sys.argv[1], {"new": contextlib.nullcontext, "old": old}, describe, "plans.json")
