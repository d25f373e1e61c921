"""Same-process A/B: remat inductor at torch.compile b=1's peak, min-cut weighed in fused seconds (new)
against in planning costs (old), interleaved with torch.compile b=1 (``bench/ab_inductor.py``)."""
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_inductor import at_compiles_peak  # noqa: E402

from remat.compiled import partitioner  # noqa: E402


@contextlib.contextmanager
def old():
    real = partitioner.Planner._recompute_time
    partitioner.Planner._recompute_time = lambda self, jg, st, *a: None if st else real(self, jg, st, *a)
    try:
        yield
    finally:
        partitioner.Planner._recompute_time = real


at_compiles_peak(sys.argv, old)
