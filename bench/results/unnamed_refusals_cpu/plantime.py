"""Planning seconds of remat.optimize(model, inputs, "50%", verify=False) on one bench_architectures model, with the
src directory given first (an old tree against the new). argv: src, model, dtype. Prints one JSON row."""
import sys, time, torch, json
sys.path.insert(0, sys.argv[1])
import remat
from remat.bench.architectures import build, _autocast
torch.set_num_threads(1)
name, dtype = sys.argv[2], sys.argv[3]
model, inputs, source = build(name)
t0 = time.perf_counter()
with _autocast(dtype):
    m = remat.optimize(model, inputs, "50%", verify=False)
print(json.dumps(dict(src=sys.argv[1], model=name, dtype=dtype, seconds=round(time.perf_counter() - t0, 2), solver=m.report.solver, recompute=m.step.planned.prediction.recompute_cost, peak=m.report.predicted_peak)))
