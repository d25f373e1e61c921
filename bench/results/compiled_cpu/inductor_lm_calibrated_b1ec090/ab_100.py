"""Same-process A/B: GPT-2 fp32 (CPU size), torch.compile b=1 against remat inductor "100%" (inductor's own partition
for both graphs), each profiled over 5 steps twice (aten ops and inductor kernels by self time), then 20 interleaved
rounds (``bench/ab_inductor.py``). Why: the benchmark's "100%" row timed alone with torch.compile b=1 read 1.035x."""
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_inductor import AB  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from remat.bench import heldout  # noqa: E402

ab = AB("gpt2", "fp32")
ab.add("compile", heldout.Compiled(ab.held.model, "inductor", 1.0, "ab_compile"))
ab.remat("r100", "100%")
res = {}
for rep in range(2):
    for k in ("compile", "r100"):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                ab.steps[k]()
        agg, cnt = collections.Counter(), collections.Counter()
        for e in prof.key_averages():
            agg[e.key] += e.self_cpu_time_total / 5e3
            cnt[e.key] += e.count / 5
        res[k] = (agg, cnt)
        print(rep, k, "profiled ms a step", round(sum(agg.values()), 2))
a, b = res["compile"], res["r100"]
for k in sorted(set(a[0]) | set(b[0]), key=lambda k: -abs(b[0][k] - a[0][k]))[:12]:
    print(f"{k[:80]:80s} {a[0][k]:7.3f} {b[0][k]:7.3f} {b[0][k] - a[0][k]:+7.3f} {a[1][k]:5.0f} {b[1][k]:5.0f}")
ab.finish(rounds=20)
