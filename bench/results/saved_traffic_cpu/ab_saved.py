"""Same-process A/B: remat inductor at torch.compile b=1's peak, inductor's partition weighed against remat's plan
with what each saves moved (new) or by recomputation alone (old), interleaved with torch.compile b=1
(``bench/ab_inductor.py``)."""
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_inductor import at_compiles_peak  # noqa: E402

from remat.compiled import fusedcost  # noqa: E402


@contextlib.contextmanager
def old():
    real = fusedcost.saved_seconds
    fusedcost.saved_seconds = lambda *a, **k: 0.0
    try:
        yield
    finally:
        fusedcost.saved_seconds = real


at_compiles_peak(sys.argv, old)
