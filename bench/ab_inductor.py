"""Same-process A/B of remat inductor builds on a held-out model (CPU sizes, one thread, bf16 autocast or
fp32): each build's first step run under its own context (what makes a build "old"), its allocator-level
peak, then every step interleaved round by round, as ratios to torch.compile b=1's. The scripts under
``bench/results/*/ab_*.py`` that produced committed A/Bs use it. Steps set ``.grad`` to None before them, and peaks
follow the benchmark's protocol (gradients left out), as remat plans on the CPU; A/Bs committed before 2026-11-30's
``timed_heavy_cpu/ab_after`` zeroed ``.grad`` in place and measured the step with it allocated.

    ab = AB("resnet", "fp32")
    ab.add("compile", heldout.Compiled(ab.held.model, "inductor", 1.0, "ab_compile"))
    ab.remat("new", budget)
    ab.remat("old", budget, during=old_behaviour)   # a context manager
    ab.optimized("eager", "50%")                    # remat.optimize's eager code
    ab.finish(rounds=30)                            # prints, writes $OUT/ab_<model>_<dtype>.json
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench" / "gpu_probe")]
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402

from overhead import interleaved  # noqa: E402

REPORT_KEYS = ("chosen", "predicted_peak", "recompute_fraction", "recompute_time", "planning_seconds", "notes")


class AB:
    """The steps of one A/B, on one held-out model built at its CPU size."""

    def __init__(self, name: str, dtype: str) -> None:
        torch.set_num_threads(1)
        heldout.raise_dynamo_limits()
        self.name, self.dtype = name, dtype
        self.held = heldout.build(name, "cpu", "cpu")
        self.params = [p for p in self.held.model.parameters() if p.requires_grad]
        self.autocast = torch.bfloat16 if dtype == "bf16" else None
        self.steps: dict[str, Callable[[], None]] = {}
        self.rows: dict[str, dict[str, Any]] = {}

    def task(self, net: torch.nn.Module) -> heldout.Task:
        return heldout.Task(net, self.held.kind, self.held.labels, self.autocast, "cpu")

    def add(self, label: str, net: torch.nn.Module, during: Callable[[], Any] = contextlib.nullcontext) -> None:
        """A step of ``net`` (parameter gradients set to None before it), its first call under ``during()``."""
        task = self.task(net)

        def step() -> None:  # (.grad None before it: what remat plans for on the CPU, gradients="auto")
            for p in self.params:
                p.grad = None
            task(**self.held.inputs).backward()

        with during():
            t0 = time.perf_counter()
            step()
            first = time.perf_counter() - t0
        step()
        # the benchmark's protocol (``bench_compiled``): gradients as remat plans for them (None on the CPU), left out
        peak = remat.measure(task, self.held.inputs, method="profiler", loss_fn=lambda loss: loss, warmup=1).peak
        self.rows[label] = {"first_s": first, "peak": peak}
        self.steps[label] = step
        print(label, self.rows[label], flush=True)

    def remat(self, label: str, budget: Any, during: Callable[[], Any] = contextlib.nullcontext) -> None:
        """``remat.backend(budget, auto, inductor)`` on the model, planned under ``during()``."""
        be = remat.backend(budget=budget, solver="auto", compiler="inductor")
        self.add(label, heldout.Compiled(self.held.model, be, None, f"ab_{label}"), during)
        self.rows[label]["budget"] = budget
        self.rows[label]["report"] = [{k: r.get(k) for k in REPORT_KEYS} for r in be.report]
        print(label, self.rows[label]["report"], flush=True)

    def optimized(self, label: str, budget: Any, during: Callable[[], Any] = contextlib.nullcontext,
                  **options: Any) -> None:
        """``remat.optimize`` (eager generated code, auto) on the model, planned under ``during()``."""
        with during(), heldout.autocast("cpu", self.autocast):
            module = remat.optimize(self.held.model, self.held.inputs, budget, **options)
        self.add(label, module)
        report = {k: getattr(module.report, k, None) for k in REPORT_KEYS}
        planned = getattr(getattr(module, "step", None), "planned", None)  # (the generated code's plan)
        report["predicted_recompute_s"] = planned.prediction.recompute_cost if planned is not None else None
        self.rows[label].update(budget=budget, report=report)
        print(label, self.rows[label]["report"], flush=True)

    def finish(self, rounds: int, reference: str = "compile") -> None:
        """Every step ``rounds`` times round-robin; medians and ratios to ``reference``'s, printed and written."""
        t = interleaved(self.steps, rounds, lambda: None)
        base = statistics.median(t[reference])
        for k, v in t.items():
            r = self.rows[k]
            r["ms"] = statistics.median(v)
            r[f"of_{reference}"] = r["ms"] / base
            r[f"of_{reference}_round_by_round"] = statistics.median([a / b for a, b in zip(v, t[reference])])
            print(f"{k:8s} {r['ms']:8.2f} ms  x{r[f'of_{reference}']:.3f}  "
                  f"(round by round x{r[f'of_{reference}_round_by_round']:.3f})  peak {r['peak']}")
        out = Path(os.environ.get("OUT", ".")) / f"ab_{self.name}_{self.dtype}.json"
        out.write_text(json.dumps({"model": self.name, "dtype": self.dtype, "rounds": rounds, "rows": self.rows},
                                  indent=1, default=str))


def at_compiles_peak(argv: list[str], old: Callable[[], Any]) -> None:
    """The A/B most scripts run: ``argv`` = model, dtype[, rounds (30)]; torch.compile b=1, then remat inductor as
    committed ("new") and under ``old()`` ("old"), both at torch.compile b=1's measured peak in bytes."""
    ab = AB(argv[1], argv[2])
    ab.add("compile", heldout.Compiled(ab.held.model, "inductor", 1.0, "ab_compile"))
    at = int(ab.rows["compile"]["peak"])
    ab.remat("new", at)
    ab.remat("old", at, during=old)
    ab.finish(int(argv[3]) if len(argv) > 3 else 30)


def at_half_vanilla(argv: list[str], olds: dict[str, Callable[[], Any]]) -> None:
    """``argv`` as ``at_compiles_peak``; vanilla and torch.compile b=1, then remat inductor as committed ("new")
    and under each of ``olds`` (label -> context), all at half of vanilla's measured peak in bytes."""
    import remat

    ab = AB(argv[1], argv[2])
    ab.add("vanilla", ab.held.model)
    half = 0.5 * remat.measure(ab.task(ab.held.model), ab.held.inputs, method="profiler").peak
    ab.rows["vanilla"]["measure_peak"] = 2 * half
    ab.add("compile", heldout.Compiled(ab.held.model, "inductor", 1.0, "ab_compile"))
    ab.remat("new", half)
    for label, old in olds.items():
        ab.remat(label, half, during=old)
    ab.finish(int(argv[3]) if len(argv) > 3 else 30)
