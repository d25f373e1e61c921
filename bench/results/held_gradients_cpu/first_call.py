"""First-call seconds (planning and compiling) of ``remat.backend`` under inductor at 50% on the held-out CPU-size
HF ResNet, planned with ``gradients="none"`` (one backward compiled) and ``"allocated"`` (the backward in two forms,
returning and accumulating, both compiled by inductor at the first backward). Fresh inductor caches, one thread.

    python bench/results/held_gradients_cpu/first_call.py OUT_DIR none      # one process each: the first
    python bench/results/held_gradients_cpu/first_call.py OUT_DIR allocated # compile in a process pays more
"""
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
import torch  # noqa: E402

sys.path[:0] = [str(Path(__file__).resolve().parents[3] / "src")]
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402

torch.set_num_threads(1)
heldout.raise_dynamo_limits()
held = heldout.build("resnet", "cpu", "cpu")
task = heldout.Task(held.model, held.kind, held.labels, None, "cpu")
vanilla = remat.measure(task, held.inputs, method="profiler", loss_fn=lambda x: x, gradients="allocated").peak
rows = []
for gradients in sys.argv[2:]:
    torch._dynamo.reset()
    be = remat.backend(budget=0.5 * vanilla, compiler="inductor", gradients=gradients)
    net = heldout.Task(heldout.Compiled(held.model, be, None, f"first_{gradients}"), held.kind, held.labels, None, "cpu")
    for p in held.model.parameters():
        p.grad = torch.zeros_like(p) if gradients == "allocated" else None
    t0 = time.perf_counter()
    net(**held.inputs).backward()
    rows.append({"gradients": gradients, "first_call_seconds": time.perf_counter() - t0,
                 "planning_seconds": be.report[0]["planning_seconds"]})
    print(rows[-1], flush=True)
out = Path(sys.argv[1])
path = out / "first_call.json"
done = json.loads(path.read_text())["rows"] if path.exists() else []
path.write_text(json.dumps({"torch": torch.__version__, "rows": done + rows}, indent=1))
