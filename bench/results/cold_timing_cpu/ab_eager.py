"""A/B of remat eager (``remat.optimize``, auto, the CPU's roofline) with each timed op run after a write over four
times a core's L2 ("new", ``costs._evict`` as committed: its inputs read from beyond the L2, as a recomputation in the
backward reads what the forward kept) and run warm ("old", the fastest in a 10 ms window of back-to-back runs), each
on an empty op-time cache of its own, timed interleaved against vanilla in one process. argv as
``selective_chains_cpu/ab_eager.py``: model, dtype, budget ("50%" or "per-block")[, rounds (30)]."""
import contextlib
import os
import sys
import tempfile
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent / "selective_chains_cpu")]
import ab_eager  # noqa: E402
from remat.compiled import costs  # noqa: E402


@contextlib.contextmanager
def old():
    """Ops timed warm, on an empty cache of their own (marked as the warm timing)."""
    with tempfile.TemporaryDirectory() as cache, mock.patch.dict(os.environ, {"REMAT_CACHE_DIR": cache}), \
            mock.patch.object(costs, "_evict", lambda: (lambda: None)), mock.patch.object(costs, "TIMING", 2):
        yield


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as fresh:
        os.environ["REMAT_CACHE_DIR"] = fresh  # ("new" times its ops too)
        ab_eager.main(old)
