"""``remat.optimize`` at 50% of the vanilla peak with ``.grad`` allocated before each step (``gradients="allocated"``),
the backward adding each gradient into ``.grad`` where it is made (``remat.compiled.accumulate``) against the same
planner with that rewrite off (every gradient returned when the backward ends, held until then). Held-out HF
ResNet and ViT at their CPU sizes, one thread; peaks allocator level; gradients of two accumulated steps compared
with eager's bit for bit. Prints and writes accumulate.json.

    python bench/results/held_gradients_cpu/accumulate.py OUT_DIR resnet:fp32 resnet:bf16 vit:fp32
"""
import contextlib
import copy
import json
import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[3] / "src")]
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.compiled import accumulate  # noqa: E402

torch.set_num_threads(1)
out, rows = Path(sys.argv[1]), []
out.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def returning():
    real = accumulate.in_place
    accumulate.in_place = lambda *args: []
    try:
        yield
    finally:
        accumulate.in_place = real


for spec in sys.argv[2:]:
    name, dtype = spec.split(":")
    held = heldout.build(name, "cpu", "cpu")
    ac = torch.bfloat16 if dtype == "bf16" else None

    def task(net):
        return heldout.Task(net, held.kind, held.labels, ac, "cpu")

    def peak(net):
        return remat.measure(task(net), held.inputs, method="profiler", loss_fn=lambda x: x,
                             gradients="allocated").peak

    def grads(net):
        for p in net.parameters():
            p.grad = torch.zeros_like(p)
        for _ in range(2):
            torch.manual_seed(0)
            task(net)(**held.inputs).backward()
        return [p.grad for p in net.parameters()]

    vanilla = peak(held.model)
    reference = grads(copy.deepcopy(held.model))
    for form in ("returning", "accumulating"):
        model = copy.deepcopy(held.model)
        t0 = time.perf_counter()
        try:
            with returning() if form == "returning" else contextlib.nullcontext(), heldout.autocast("cpu", ac):
                module = remat.optimize(model, held.inputs, 0.5 * vanilla, gradients="allocated")
            r = module.report
            row = {"executor": r.executor, "predicted": r.predicted_peak, "measured": peak(module),
                   "recompute_fraction": r.recompute_fraction, "solver": r.solver,
                   "bitwise_equal_to_eager": all(torch.equal(g, e) for g, e in zip(grads(module), reference))}
        except remat.InfeasibleError as e:
            row = {"error": " ".join(str(e).split())[:400]}
        row.update(model=name, dtype=dtype, form=form, budget=0.5 * vanilla, vanilla=vanilla,
                   seconds=time.perf_counter() - t0)
        if "measured" in row:
            row["measured_over_budget"] = row["measured"] / row["budget"]
        print(json.dumps(row), flush=True)
        rows.append(row)
        (out / "accumulate.json").write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1))
