"""Planning seconds of remat.optimize (verify=False, "50%") on HF Jamba from bench_architectures' config, with
and without selective.executed's memo (EXECUTED_STEPS 0 = old), alternating old, new, old, new.
argv: model:dtype list, output JSON."""
import sys, time, torch, json
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3] / "src"))
import remat
from remat.bench.architectures import build, _autocast
from remat.solvers import selective
from remat.judge import forget_floors
torch.set_num_threads(1)
out = []
for spec in sys.argv[1].split(","):
    name, dtype = spec.split(":")
    model, inputs, source = build(name)
    for which in ("old", "new", "old", "new"):
        selective.EXECUTED_STEPS = 0 if which == "old" else 2_000_000
        forget_floors()
        t0 = time.perf_counter()
        with _autocast(dtype):
            m = remat.optimize(model, inputs, "50%", verify=False)
        dt = time.perf_counter() - t0
        row = dict(model=name, dtype=dtype, which=which, seconds=round(dt, 2), solver=m.report.solver,
                   recompute=m.step.planned.prediction.recompute_cost, peak=m.report.predicted_peak)
        print(json.dumps(row), flush=True); out.append(row)
json.dump(out, open(sys.argv[2], "w"), indent=1)
