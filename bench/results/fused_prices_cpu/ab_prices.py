"""Same-process A/B: remat inductor at 50% of the vanilla peak. new: the fused search in both move orders, plans
weighed in fused seconds with transcendental functions at the device's rate (20f81a2); unrated: the same with a
transcendental function taken as one FLOP an element (43d72fb's prices); unpriced: one move order, by the planning
graph's per-op costs, plans weighed in those costs (before 43d72fb). Interleaved with torch.compile b=1
(``bench/ab_inductor.py``)."""
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_inductor import AB  # noqa: E402

import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
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


ab = AB(sys.argv[1], sys.argv[2])
ab.add("vanilla", ab.held.model)
half = 0.5 * remat.measure(ab.task(ab.held.model), ab.held.inputs, method="profiler").peak
ab.rows["vanilla"]["measure_peak"] = 2 * half
ab.add("compile", heldout.Compiled(ab.held.model, "inductor", 1.0, "ab_compile"))
ab.remat("new", half)
ab.remat("unrated", half, during=unrated)
ab.remat("unpriced", half, during=unpriced)
ab.finish(int(sys.argv[3]) if len(sys.argv) > 3 else 30)
