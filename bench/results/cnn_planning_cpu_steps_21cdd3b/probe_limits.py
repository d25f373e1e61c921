"""The fused search's plan for HF ResNet-152 fp32 at "50%" (inductor, 2 threads) with each chain limit of the
vanilla step's second search (`partitioner.FUSED_CHAIN_LIMIT`), 240 s a search instead of 60: the planning call is
stopped at its first fused search, and that search is run again once per limit."""
import copy
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]
torch.set_num_threads(2)
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.compiled import partitioner as P  # noqa: E402
from bench_cnn_planning import build  # noqa: E402

grab = {}
search = P.Planner._judged_selective


def stop(self, jg, pg, target, tail, seeds=None, seconds=P.FUSED_SECONDS):
    if seeds is None and not grab:
        grab.update(args=(self, jg, pg, target, tail))
        raise KeyboardInterrupt
    return search(self, jg, pg, target, tail, seeds, seconds)


P.Planner._judged_selective = stop
model, inputs, labels = build([3, 8, 36, 3], 2, 224)
backend = remat.backend(budget="50%", compiler="inductor")
try:
    heldout.Task(torch.compile(copy.deepcopy(model), backend=backend), "vision", labels, None)(**inputs).backward()
except KeyboardInterrupt:
    pass
print("budget", grab["args"][3], flush=True)
for limit in (2, 4, 8, 16, None):
    P.FUSED_CHAIN_LIMIT = limit
    t0 = time.perf_counter()
    plan = search(*grab["args"], None, 240.0)[0].plan
    print(f"limit {limit}: {time.perf_counter() - t0:.0f} s, {plan.stats.get('chosen')}, judged peak {plan.peak:.4g}, "
          f"recompute {plan.recompute_cost:.4g}, fused seconds {plan.stats.get('fused_seconds'):.4g}", flush=True)
