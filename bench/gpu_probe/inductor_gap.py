"""Where remat inductor loses time against torch.compile b=1 on a GPU (H200, 15d59f3: Llama bf16 at
torch.compile's peak 1.137x its step, with 0.55 ms of predicted recomputation in a 41 ms step):
the recomputation, or remat's inductor settings (``compiled/fusion.py``: no buffer pool, fusion
guard, no peak-memory reordering; until 3dd9cdf also horizontal fusion of adjacent kernels only,
which cost 4.4% there: bench/results/gpu_probe_h200), held for memory exactness?

    python3 bench/gpu_probe/inductor_gap.py OUT [MODEL]     # MODEL default llama; bf16 autocast; ~6 min
    DEVICE=cpu .venv/bin/python bench/gpu_probe/inductor_gap.py /tmp/g gpt2   # smoke here (CPU sizes)
    (ROUNDS=N: N interleaved rounds instead of 10; SIZE: the model's size, gpu on cuda and cpu on the CPU
    by default; the test suite's smoke takes ROUNDS=2, SIZE=quick)

Rows, each compiled on its own: torch.compile at activation_memory_budget 1.0; remat inductor at
torch.compile's measured peak with remat's settings ("exact") and with inductor's own (``OWN``; each
alone measured as remat's on 3dd9cdf); remat inductor "50%" with remat's settings and with fused kernels
of at most ``IO_CAP`` buffers; remat inductor "100%". Per row: peak (max_memory_allocated during the
step minus what was allocated before), median step of 10 interleaved rounds, and one profiled step's
kernel count and device time; the kernels whose summed time differs most from torch.compile's. Prints
a table, writes OUT/gap.json, OUT/kernels.txt (the source of up to six kernels remat runs, at
torch.compile's peak or at "50%", that torch.compile does not) and OUT/plan.txt (what each plan
recomputes, and its backward's fx code).

On 3dd9cdf one such kernel, a persistent reduction over the recomputed embedding, residual stream
and RMSNorm statistics, ran once for 2.26 ms, where torch.compile ran 15 kernels of the same ops but
the embedding at 41 us each. The same plan made on the CPU with the H200's roofline figures (Llama
16x1024, one sequence of 1024, "50%") recomputes all 32 residual adds once each; inductor runs them
in the backward's second kernel, reading the 32 saved attention and MLP outputs and storing every
fourth sum in fp32 (its ``realize_acc_reads_threshold``), and each layer's norm recomputes its sum
from the nearest stored one. On the GPU that chain became one persistent reduction with the final
norm's statistics; "kernels of at most IO_CAP buffers" asks whether splitting it gives the time back.
Since 0b8d1fe the plan at torch.compile's peak is expected to be torch.compile's own partition
(``Planner._min_cut``, weighed in fused seconds), whose "100%" row ran 1.014x.
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
import torch  # noqa: E402

sys.path.insert(0, "src")
sys.path.insert(0, str(Path(__file__).parent))
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.compiled import fusion, fusionguard  # noqa: E402

from overhead import interleaved, kernels  # noqa: E402

DEVICE = os.environ.get("DEVICE", "cuda")
CUDA = DEVICE == "cuda"
ROUNDS = int(os.environ.get("ROUNDS", "10"))
SIZE = os.environ.get("SIZE") or ("gpu" if CUDA else "cpu")


OWN = ("pool", "guard", "reorder")  # remat's settings, each of which can be inductor's own
IO_CAP = 16  # "io": no fused kernel reads and writes more buffers than this (inductor's max_fusion_unique_io_buffers)


def inductor_settings(*own: str) -> Callable[[], Any]:
    """While remat's graphs compile (the first step), inductor's own settings for those named in
    ``own`` (``OWN``): its buffer pool, no fusion guard, its peak-memory reordering; and with "io",
    fused kernels of at most ``IO_CAP`` buffers (where this torch has that setting)."""

    @contextlib.contextmanager
    def settings() -> Iterator[None]:
        import remat.compiled.backend as backend

        saved = fusion.BUFFER_POOL, fusionguard.of, backend.config_patches
        if "pool" in own:
            fusion.BUFFER_POOL = True
        if "guard" in own:
            fusionguard.of = lambda gm: None
        if "reorder" in own:
            backend.config_patches = lambda: {k: v for k, v in saved[2]().items() if k != "reorder_for_peak_memory"}
        if "io" in own and hasattr(torch._inductor.config, "max_fusion_unique_io_buffers"):
            backend.config_patches = lambda: {**saved[2](), "max_fusion_unique_io_buffers": IO_CAP}
        try:
            yield
        finally:
            fusion.BUFFER_POOL, fusionguard.of, backend.config_patches = saved

    return settings


def peak_of(step: Callable[[], None]) -> float:
    """Bytes allocated at the step's peak above what was allocated before it."""
    if not CUDA:  # allocator level, replayed from the profiler's allocation events
        return float(remat.measure(step, method="profiler", warmup=0).peak)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return float(torch.cuda.max_memory_allocated() - before)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    name = argv[1] if len(argv) > 1 else "llama"
    heldout.raise_dynamo_limits()
    held = heldout.build(name, DEVICE, SIZE)
    params = [p for p in held.model.parameters() if p.requires_grad]
    sync = torch.cuda.synchronize if CUDA else (lambda: None)
    rows: dict[str, dict[str, Any]] = {}
    steps: dict[str, Callable[[], None]] = {}

    def add(label: str, net: torch.nn.Module, settings: Callable[[], Any] = contextlib.nullcontext) -> None:
        task = heldout.Task(net, held.kind, held.labels, torch.bfloat16, DEVICE)

        def step() -> None:
            task(**held.inputs).backward()
            torch._foreach_zero_([p.grad for p in params if p.grad is not None])

        t0 = time.perf_counter()
        with settings():
            step()
        sync()
        first = time.perf_counter() - t0
        step()
        rows[label] = {"first_step_s": first, "peak_bytes": peak_of(step)}
        steps[label] = step
        print(f"[{name}] {label}: first step {first:.1f} s, peak {rows[label]['peak_bytes'] / 2**20:.1f} MiB",
              flush=True)

    add("torch.compile b=1", heldout.Compiled(held.model, "inductor", 1.0, "gap_compile"))
    at = rows["torch.compile b=1"]["peak_bytes"]
    # at torch.compile's peak (0.55 ms of recomputation predicted on the H200 at 3dd9cdf): remat's settings and
    # inductor's own (each of those alone measured as remat's: 1.099x on 3dd9cdf); at "50%" (1.156x on 15d59f3, the
    # recomputed residual stream run as one persistent reduction at the backward's start) remat's settings, and
    # fused kernels of at most IO_CAP buffers; then "100%" with remat's
    variants = [(int(at), "at torch.compile's peak", "exact settings", ()),
                (int(at), "at torch.compile's peak", "inductor settings", OWN),
                ("50%", "50%", "exact settings", ()),
                ("50%", "50%", f"kernels of at most {IO_CAP} buffers", ("io",)),
                ("100%", "100%", "exact settings", ())]
    stored: dict[str, Any] = {}  # per budget, planned once (one graph): the variants differ in inductor's code alone
    plans = []
    for budget, tag, label, own in variants:
        be = remat.backend(budget=budget, solver="auto", compiler="inductor")
        if stored.get(tag) is not None:
            be.planner.plan = stored[tag]
        key = f"remat {tag}, {label}"
        add(key, heldout.Compiled(held.model, be, None, f"gap_{len(rows)}"), inductor_settings(*own))
        rows[key]["report"] = [{k: r.get(k) for k in ("chosen", "predicted_peak", "recompute_fraction",
                                                      "recompute_time")} for r in be.report]
        if tag not in stored:  # behind a graph break (GPT-2's loss) each graph's plan is written, none reused
            plans.append(f"# ===== remat {tag}\n" + "\n\n".join(plan_text(p) for p in be.planner.planned))
            stored[tag] = be.planner.planned[0].plan if len(be.planner.planned) == 1 else None
    (out / "plan.txt").write_text("\n\n".join(plans))
    times = interleaved(steps, ROUNDS, sync)
    base = statistics.median(times["torch.compile b=1"])
    by_kernel = {}
    for label, step in steps.items():
        k = kernels(step)
        by_kernel[label] = k
        rows[label].update(step_ms=statistics.median(times[label]), of_compile=statistics.median(times[label]) / base,
                           kernels=sum(c for c, _ in k.values()), kernel_ms=sum(t for _, t in k.values()) / 1e3)
    print(f"\n{name} bf16 on {torch.cuda.get_device_name() if CUDA else 'cpu'}")
    print(f"  {'method':45s} {'peak MiB':>9s} {'step ms':>8s} {'/compile':>8s} {'kernels':>7s} {'kernel ms':>9s}")
    for label, r in rows.items():
        print(f"  {label:45s} {r['peak_bytes'] / 2**20:9.1f} {r['step_ms']:8.2f} {r['of_compile']:8.3f} "
              f"{r['kernels']:7d} {r['kernel_ms']:9.2f}")
    ref = by_kernel["torch.compile b=1"]
    diffs = {}
    for label, k in by_kernel.items():
        if label == "torch.compile b=1":
            continue
        names = sorted(set(ref) | set(k), key=lambda n: -abs(k.get(n, [0, 0])[1] - ref.get(n, [0, 0])[1]))
        diffs[label] = [{"kernel": n[:120], "compile": ref.get(n), "remat": k.get(n)} for n in names[:12]]
    for label in ("remat 100%, exact settings", "remat at torch.compile's peak, exact settings",
                  "remat at torch.compile's peak, inductor settings", "remat 50%, exact settings",
                  f"remat 50%, kernels of at most {IO_CAP} buffers"):
        print(f"\n  {label}: kernels differing most from torch.compile's (count, summed us)")
        for d in diffs[label][:8]:
            print(f"    {d['kernel'][:80]:80s} compile {d['compile']}  remat {d['remat']}")
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if CUDA else "cpu", "model": name,
              "rows": rows, "top_kernel_differences": diffs}
    (out / "gap.json").write_text(json.dumps(result, indent=1, default=str))
    mine = [d["kernel"] for label in ("remat at torch.compile's peak, exact settings", "remat 50%, exact settings")
            for d in diffs[label] if d["compile"] is None]
    (out / "kernels.txt").write_text(kernel_sources(list(dict.fromkeys(mine))[:6]))


def plan_text(planned: Any) -> str:
    """What the plan at torch.compile's peak recomputes (each value, its op, how many times, and
    its bytes) and the backward graph's fx code: which recomputation inductor fused into which
    kernel (``kernels.txt``) reads against it."""
    jg, g = planned.joint, planned.joint.graph
    lines = [f"# {g.name}: {len(g)} planning nodes, solver {planned.plan.stats.get('chosen', planned.plan.solver)}, "
             f"predicted peak {planned.peak:.0f}, recompute_time {planned.recompute_time}",
             "# recomputed in the backward (planning id, target, times, bytes, fusible):"]
    first_bwd = next((i for i, (kind, _) in enumerate(planned.steps) if kind == "bwd"), len(planned.steps))
    recomputed = Counter(v for kind, v in planned.steps[first_bwd:] if kind == "fwd")
    for v, times in recomputed.items():
        n = jg.node_of.get(v)
        lines.append(f"{v:30s} {str(n.target if n is not None else '?'):50s} {times:3d} {g[v].mem:12.0f} "
                     f"{v in jg.fusible}")
    lines += ["", "# the backward graph", planned.split.backward.code]
    return "\n".join(lines)


def kernel_sources(names: list[str]) -> str:
    """The generated source of each named kernel, from inductor's cache directory (one file per
    kernel on a GPU): what a kernel that runs slower than its bytes suggest is made of."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    found = {}
    for path in sorted(Path(cache_dir()).rglob("*.py")):
        text = path.read_text(errors="replace")
        for name in names:
            if name not in found and f"def {name}" in text:  # (names are cut to 120 characters)
                found[name] = f"# ===== {name} ({path})\n{text}"
    if not names:
        return "# no kernel among the largest differences runs in remat's code alone\n"
    return "\n\n".join(found.get(n, f"# ===== {n}: source not found") for n in names)


if __name__ == "__main__":
    main()
