"""Same-process A/B: remat inductor at 50% of the vanilla peak. new: the fused search in both move orders, plans
weighed in fused seconds with transcendental functions at the device's rate (20f81a2); unrated: the same with a
transcendental function taken as one FLOP an element (43d72fb's prices); unpriced: one move order, by the planning
graph's per-op costs, plans weighed in those costs (before 43d72fb). Interleaved with torch.compile b=1
(``bench/ab_inductor.py``)."""
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_inductor import at_half_vanilla  # noqa: E402

from remat.compiled import costs, fusedcost  # noqa: E402


@contextlib.contextmanager
def unrated():
    rated = costs.rated
    costs.rated = lambda n: None
    try:
        yield
    finally:
        costs.rated = rated


@contextlib.contextmanager
def unpriced():
    priced = fusedcost.priced
    fusedcost.priced = lambda jg, graph, *args, **kwargs: graph  # one order; plans compared in the graph's costs
    try:
        yield
    finally:
        fusedcost.priced = priced


at_half_vanilla(sys.argv, {"unrated": unrated, "unpriced": unpriced})
