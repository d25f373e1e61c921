"""auto on bench_llm_planning's captured Llama (32 layers) with ``selective-chains`` among its candidates ("new") and
without it ("old", ``plans_eager.old``), at 90/70/50/30% of the vanilla simulated peak, in one process: seconds,
chosen solver, recompute (fraction of a forward). Also ``selective`` alone, with and without a time limit."""
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parents[1]), str(HERE)]
import remat  # noqa: E402
from bench_llm_planning import models  # noqa: E402
from plans_eager import old  # noqa: E402
from remat import schedule  # noqa: E402

model, inputs = models(False)["llama-32"]
g = remat.optimize(model, inputs, budget="100%", verify=False).graph
vanilla, forward = remat.simulate(g, schedule.vanilla(g)).peak, g.cost(g.order)
for frac in (0.9, 0.7, 0.5, 0.3):
    line = [f"{frac:.0%}"]
    for which in ("new", "old"):
        if which == "new":
            plan = remat.solve(g, frac * vanilla, solver="auto")
        else:
            with old():
                plan = remat.solve(g, frac * vanilla, solver="auto")
        line.append(f"{which}: {plan.solve_seconds:.1f} s {plan.stats.get('chosen')} {plan.recompute_cost / forward:.4f}")
    for solver in ("selective", "selective-chains"):
        t = time.perf_counter()
        p = remat.solve(g, frac * vanilla, solver=solver)
        line.append(f"{solver} alone: {time.perf_counter() - t:.1f} s {p.recompute_cost / forward:.4f} "
                    f"{p.feasible} {p.stats.get('cut_short', '')}")
    print(" | ".join(line), flush=True)
