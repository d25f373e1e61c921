"""Where remat's no-recompute step loses time against eager on a GPU (H100, feed18f: GPT-2 1.054x,
ViT 1.037x vanilla, where the CPU reads <= 1.02x): kernels or the CPU keeping ahead of them?

    python3 bench/gpu_probe/overhead.py OUT [MODELS]    # MODELS default gpt2,vit; bf16 autocast
    DEVICE=cpu .venv/bin/python bench/gpu_probe/overhead.py /tmp/o gpt2   # smoke here (CPU sizes, CPU ops)
    BUDGETS="100%,50%" python3 bench/gpu_probe/overhead.py OUT gpt2    # also where "50%" loses its time
    (STEPS=N: N timed steps and N // 3 warm-ups instead of 10 and 3; SIZE: the models' size, gpu on
    cuda and cpu on the CPU by default; BUDGETS: remat's budgets, "100%" by default; the test suite's smoke
    takes STEPS=2, SIZE=quick)

Per model, vanilla and remat at each budget (the benchmark's models, sizes and Task), each warmed up:
- step ms: median of 10 synchronized steps;
- enqueue ms: median CPU time to issue one step without synchronizing (after a sync), the
  step's Python and launch work; near the step time means the GPU waits for the CPU;
- kernels: count and summed device time of one profiled step, and the kernels whose summed
  time differs most from vanilla's (``top_kernel_differences``: the first budget's; ``by_budget``: each);
- predicted recompute ms: what the plan's prediction adds for its recomputation. On an H200 GPT-2's
  "50%" step measured 1.080x the no-recompute step's, twice the 4.78 ms predicted (3dd9cdf): kernels or
  enqueue time say where the rest goes.
Prints one table per model and writes OUT/overhead.json.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, "src")
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402

DEVICE = os.environ.get("DEVICE", "cuda")
sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
STEPS = int(os.environ.get("STEPS", "10"))
SIZE = os.environ.get("SIZE") or ("gpu" if DEVICE == "cuda" else "cpu")
BUDGETS = [b.strip() for b in os.environ.get("BUDGETS", "100%").split(",") if b.strip()]


def timed(step, n: int = STEPS) -> tuple[float, float]:
    """(median synchronized step ms, median enqueue ms)."""
    steps, enqueue = [], []
    for _ in range(n):
        sync()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        enqueue.append((t1 - t0) * 1e3)
        steps.append((t2 - t0) * 1e3)
    return statistics.median(steps), statistics.median(enqueue)


def interleaved(steps: dict, rounds: int, sync=sync) -> dict[str, list[float]]:
    """Synchronized ms of each step, the steps run round-robin ``rounds`` times (one round, every step; each
    round starting one step later, ``remat.bench.steps.rotated``)."""
    from remat.bench.steps import rotated

    times: dict[str, list[float]] = {k: [] for k in steps}
    for r in range(rounds):
        for label, step in rotated(steps, r):
            sync()
            t0 = time.perf_counter()
            step()
            sync()
            times[label].append((time.perf_counter() - t0) * 1e3)
    return times


def kernels(step) -> dict[str, list[float]]:
    """Kernel name -> [count, summed device microseconds] over one profiled step."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    cuda = DEVICE == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        step()
        sync()
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if cuda and e.device_type == torch.autograd.DeviceType.CUDA:
            out[e.name][0] += 1
            out[e.name][1] += e.device_time_total
        elif not cuda and e.name.startswith("aten::"):
            out[e.name][0] += 1
            out[e.name][1] += e.self_cpu_time_total
    return dict(out)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    models = (argv[1] if len(argv) > 1 else "gpt2,vit").split(",")
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
              "models": {}}
    for name in models:
        held = heldout.build(name, DEVICE, SIZE)
        nets = [("vanilla", held.model, None)]
        for budget in BUDGETS:
            with heldout.autocast(DEVICE, torch.bfloat16):
                opt = remat.optimize(held.model, held.inputs, budget)
            planned = getattr(getattr(opt, "step", None), "planned", None)  # None: the step runs eager
            nets.append((f"remat {budget}", opt, planned.prediction.recompute_cost if planned is not None else 0.0))
        rows = {}
        for label, net, recompute in nets:
            task = heldout.Task(net, held.kind, held.labels, torch.bfloat16, DEVICE)
            params = [p for p in held.model.parameters() if p.requires_grad]

            def step(task=task, params=params) -> None:
                task(**held.inputs).backward()
                torch._foreach_zero_([p.grad for p in params if p.grad is not None])

            for _ in range(max(1, STEPS // 3)):
                step()
            ms, enq = timed(step)
            k = kernels(step)
            rows[label] = {"step_ms": ms, "enqueue_ms": enq, "kernels": sum(c for c, _ in k.values()),
                           "kernel_ms": sum(t for _, t in k.values()) / 1e3, "by_kernel": k}
            if recompute is not None:
                rows[label]["predicted_recompute_ms"] = 1e3 * recompute
        a = rows["vanilla"]
        by_budget = {}
        for label, _, _ in nets[1:]:
            b = rows[label]
            diff = sorted(set(a["by_kernel"]) | set(b["by_kernel"]),
                          key=lambda n: -abs(b["by_kernel"].get(n, [0, 0])[1] - a["by_kernel"].get(n, [0, 0])[1]))
            by_budget[label] = [{"kernel": n[:120], "vanilla": a["by_kernel"].get(n), "remat": b["by_kernel"].get(n)}
                                for n in diff[:15]]
        print(f"\n{name}")
        for label, r in rows.items():
            predicted = r.get("predicted_recompute_ms")
            extra = f"  predicted recompute {predicted:6.2f} ms" if predicted is not None else ""
            print(f"  {label:12s} step {r['step_ms']:7.2f} ms  enqueue {r['enqueue_ms']:7.2f} ms  "
                  f"{r['kernels']:5d} kernels {r['kernel_ms']:7.2f} ms{extra}")
        for label, top in by_budget.items():
            print(f"  kernels against vanilla's, {label}:")
            for t in top:
                print(f"    {t['kernel'][:70]:70s} vanilla {t['vanilla']}  remat {t['remat']}")
        for r in rows.values():
            r.pop("by_kernel")
        result["models"][name] = {"rows": rows, "top_kernel_differences": next(iter(by_budget.values())),
                                  "by_budget": by_budget}
        (out / "overhead.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
