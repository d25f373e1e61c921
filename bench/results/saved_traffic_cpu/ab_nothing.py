"""Same-process A/B at torch.compile b=1's peak: inductor's partition weighed against a plan of remat's that recomputes
nothing (new, 6840876) or only against one that recomputes (old), interleaved with torch.compile b=1."""
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_inductor import at_compiles_peak  # noqa: E402

from remat.compiled import partitioner  # noqa: E402


@contextlib.contextmanager
def old():
    real = partitioner.Planner._min_cut

    def only_when_recomputing(self, jg, gm, ji, options, target, tail, code, than=None):
        if than is not None and than[0] == 0:
            return None
        return real(self, jg, gm, ji, options, target, tail, code, than)
    partitioner.Planner._min_cut = only_when_recomputing
    try:
        yield
    finally:
        partitioner.Planner._min_cut = real


at_compiles_peak(sys.argv, old)
