"""Which starts and move orders of the fused selective search fit HF ResNet-152 fp32 at "50%" (inductor, 2 threads):
each `selective.solve` call logged, its time limit set to argv[1] / 4 seconds (the default: 60 s in all)."""
import sys, copy, torch, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]
torch.set_num_threads(2)
import remat
from remat.bench import heldout
from remat.solvers import selective
from bench_cnn_planning import build
secs = float(sys.argv[1])
orig = selective.solve
def spy(*a, **k):
    k["time_limit"] = secs / 4 if k.get("time_limit") else k.get("time_limit")
    t = time.perf_counter()
    p = orig(*a, **k)
    start = "vanilla" if k.get("start") is None else "seed"
    stats = {x: y for x, y in p.stats.items() if isinstance(y, (int, float, str))}
    print(f"solve start={start} limit={k.get('time_limit'):.1f}s took={time.perf_counter() - t:.1f}s "
          f"feasible={p.feasible} peak={p.peak:.4g} cost={p.recompute_cost:.4g} stats={stats}", flush=True)
    return p
selective.solve = spy
model, inputs, labels = build([3, 8, 36, 3], 2, 224)
backend = remat.backend(budget="50%", compiler="inductor")
net = heldout.Task(torch.compile(copy.deepcopy(model), backend=backend), "vision", labels, None)
net(**inputs).backward()
r = backend.report[-1]
print("chosen", r.get("chosen"), "recompute", r.get("recompute_fraction"), "planning", r.get("planning_seconds"),
      "predicted", r.get("predicted_peak"), "budget", r.get("budget"))
