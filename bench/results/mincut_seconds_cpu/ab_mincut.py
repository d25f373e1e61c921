"""Same-process A/B: remat inductor at torch.compile b=1's peak, min-cut weighed in fused seconds (new)
against in planning costs (old), interleaved with torch.compile b=1. CPU sizes, one thread."""
import os, sys, time, json, statistics
os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"; os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
import torch
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench" / "gpu_probe")]
import remat
from remat.bench import heldout
from remat.compiled import partitioner
from overhead import interleaved
torch.set_num_threads(1)
heldout.raise_dynamo_limits()
name, dt = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 30
dtype = torch.bfloat16 if dt == "bf16" else None
held = heldout.build(name, "cpu", "cpu")
params = [p for p in held.model.parameters() if p.requires_grad]
steps, rows = {}, {}
real = partitioner.Planner._recompute_time

def add(label, net, old=False):
    task = heldout.Task(net, held.kind, held.labels, dtype, "cpu")
    def step():
        task(**held.inputs).backward()
        torch._foreach_zero_([p.grad for p in params if p.grad is not None])
    if old:
        partitioner.Planner._recompute_time = lambda self, jg, st, *a: None if st else real(self, jg, st, *a)
    try:
        t0 = time.perf_counter(); step(); first = time.perf_counter() - t0
    finally:
        partitioner.Planner._recompute_time = real
    step()
    rows[label] = {"first_s": first, "peak": remat.measure(step, method="profiler", warmup=0).peak}
    steps[label] = step
    print(label, rows[label], flush=True)

add("compile", heldout.Compiled(held.model, "inductor", 1.0, "ab_compile"))
at = int(rows["compile"]["peak"])
for label, old in (("new", False), ("old", True)):
    be = remat.backend(budget=at, solver="auto", compiler="inductor")
    add(label, heldout.Compiled(held.model, be, None, f"ab_{label}"), old)
    rows[label]["report"] = [{k: r.get(k) for k in ("chosen", "predicted_peak", "recompute_fraction", "recompute_time")}
                             for r in be.report]
    print(label, rows[label]["report"], flush=True)
t = interleaved(steps, rounds, lambda: None)
base = statistics.median(t["compile"])
for k, v in t.items():
    rows[k]["ms"] = statistics.median(v); rows[k]["of_compile"] = statistics.median(v) / base
    rows[k]["of_compile_round_by_round"] = statistics.median([a / b for a, b in zip(v, t["compile"])])
    print(f"{k:8s} {rows[k]['ms']:8.2f} ms  x{rows[k]['of_compile']:.3f}  (round by round x{rows[k]['of_compile_round_by_round']:.3f})  peak {rows[k]['peak']}")
json.dump({"model": name, "dtype": dt, "rounds": rounds, "rows": rows}, open(Path(os.environ.get("OUT", ".")) / f"ab_{name}_{dt}.json", "w"), indent=1, default=str)
