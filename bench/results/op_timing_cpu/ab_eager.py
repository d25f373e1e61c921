"""A/B of remat eager (``remat.optimize``, auto, the CPU's roofline) with its timed ops' seconds taken as the
fastest run in a 10 ms window ("new", ``costs._op_seconds`` as committed) and as the median of five runs ("old",
before it), each on an op-time cache of its own, empty at the start, timed interleaved against vanilla in one
process. argv as ``selective_chains_cpu/ab_eager.py``: model, dtype, budget ("50%" or "per-block")[, rounds (30)]."""
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent / "selective_chains_cpu")]
import ab_eager  # noqa: E402
from remat.compiled import costs  # noqa: E402


def median_of_five(fn, device) -> float:  # noqa: ANN001 -- the timing before (``_median_seconds``)
    sync = __import__("torch").cuda.synchronize if device.type == "cuda" else (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(5):
        started = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


@contextlib.contextmanager
def old():
    """Op seconds as the median of five runs, on an empty cache of their own (marked as the old timing)."""
    with tempfile.TemporaryDirectory() as cache, mock.patch.dict(os.environ, {"REMAT_CACHE_DIR": cache}), \
            mock.patch.object(costs, "_op_seconds", median_of_five), mock.patch.object(costs, "TIMING", 1):
        yield


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as fresh:
        os.environ["REMAT_CACHE_DIR"] = fresh  # ("new" times its ops too)
        ab_eager.main(old)
