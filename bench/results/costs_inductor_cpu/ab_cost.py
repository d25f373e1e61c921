"""Same-process A/B: remat inductor at 50% of the vanilla peak planned with each cost model (roofline, the CPU's
default; profile; flops), interleaved with torch.compile b=1 (``bench/ab_inductor.py``), 20 rounds. CPU sizes."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_inductor import AB, REPORT_KEYS  # noqa: E402

import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402

ab = AB(sys.argv[1], sys.argv[2])
half = 0.5 * remat.measure(ab.task(ab.held.model), ab.held.inputs, method="profiler").peak
ab.add("compile", heldout.Compiled(ab.held.model, "inductor", 1.0, "ab_compile"))
ab.remat("roofline", half)
for cost in ("profile", "flops"):
    be = remat.backend(budget=half, solver="auto", compiler="inductor", cost=cost)
    ab.add(cost, heldout.Compiled(ab.held.model, be, None, f"ab_{cost}"))
    ab.rows[cost]["report"] = [{k: r.get(k) for k in REPORT_KEYS} for r in be.report]
    print(cost, ab.rows[cost]["report"], flush=True)
ab.finish(int(sys.argv[3]) if len(sys.argv) > 3 else 20)
