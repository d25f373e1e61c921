"""Same-process A/B: remat inductor at torch.compile b=1's peak, inductor's partition weighed against remat's plan
with what each saves moved (new) or by recomputation alone (old), interleaved with torch.compile b=1
(``bench/ab_inductor.py``)."""
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_inductor import AB  # noqa: E402

from remat.bench import heldout  # noqa: E402
from remat.compiled import fusedcost  # noqa: E402


@contextlib.contextmanager
def old():
    real = fusedcost.saved_seconds
    fusedcost.saved_seconds = lambda *a, **k: 0.0
    try:
        yield
    finally:
        fusedcost.saved_seconds = real


ab = AB(sys.argv[1], sys.argv[2])
ab.add("compile", heldout.Compiled(ab.held.model, "inductor", 1.0, "ab_compile"))
at = int(ab.rows["compile"]["peak"])
ab.remat("new", at)
ab.remat("old", at, during=old)
ab.finish(int(sys.argv[3]) if len(sys.argv) > 3 else 30)
