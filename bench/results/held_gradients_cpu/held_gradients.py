"""Held-out models (CPU sizes, fp32, one thread) under remat.backend at 50% of the vanilla peak, measured with
the parameters' ``.grad`` allocated before the step (``remat.measure(gradients="allocated")``, the protocol on
CUDA): the plan made counting the compiled backward's returned gradients (``gradients="allocated"``) against the
plan made leaving them out (``"none"``, the CPU default and, before, the only way). Prints and writes JSON.

    python bench/results/held_gradients_cpu/held_gradients.py OUT_DIR resnet vit
    DTYPE=bf16 python ...   # under bf16 autocast: held_gradients_bf16.json
"""
import json
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
import torch  # noqa: E402

sys.path[:0] = [str(Path(__file__).resolve().parents[3] / "src")]
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402

torch.set_num_threads(1)
AUTOCAST = torch.bfloat16 if os.environ.get("DTYPE") == "bf16" else None
NAME = "held_gradients_bf16.json" if AUTOCAST else "held_gradients.json"
heldout.raise_dynamo_limits()
out, rows = Path(sys.argv[1]), []
out.mkdir(parents=True, exist_ok=True)
for name in sys.argv[2:]:
    held = heldout.build(name, "cpu", "cpu")
    params = sum(p.numel() * p.element_size() for p in held.model.parameters() if p.requires_grad)

    def peak(net, gradients):
        task = heldout.Task(net, held.kind, held.labels, AUTOCAST, "cpu")
        return remat.measure(task, held.inputs, method="profiler", loss_fn=lambda x: x, gradients=gradients).peak

    vanilla = {g: peak(held.model, g) for g in ("none", "allocated")}
    for compiler in ("eager", "inductor"):
        budget = 0.5 * vanilla["allocated"]
        for planned in ("none", "allocated", "allocated"):  # the second "allocated": at the minimum a refusal names
            torch._dynamo.reset()
            asked = budget
            be = remat.backend(budget=budget, compiler=compiler, gradients=planned)
            t0 = time.perf_counter()
            try:
                got = peak(heldout.Compiled(held.model, be, None, f"hg_{compiler}_{planned}"), "allocated")
                row = {"predicted": sum(r["predicted_peak"] for r in be.report[:1]), "measured": got,
                       "recompute_fraction": be.report[0]["recompute_fraction"], "solver": be.report[0]["chosen"]}
            except Exception as e:  # noqa: BLE001 - a refusal is a result
                row = {"error": " ".join(str(getattr(e, "inner_exception", e)).split())[:400]}
                named = re.search(r"(\d+) bytes\)", row["error"])
                if named:
                    budget = float(named.group(1))
            row.update(model=name, compiler=compiler, planned_for=planned, budget=asked, params=params,
                       vanilla=vanilla, seconds=time.perf_counter() - t0)
            if "measured" in row:
                row["measured_over_budget"] = row["measured"] / asked
            print(json.dumps(row), flush=True)
            rows.append(row)
            (out / NAME).write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1))
            if "error" not in row and planned == "allocated":
                break
