"""Inductor's CPU code for remat's plans, a C++ function per kernel against kernels grouped where
the fusion guard allows (``remat.compiled.fusion.GROUP_KERNELS``): the first step's seconds (trace,
plan, compile), the C++ modules its code loads (each compiled apart), and the measured peak against
the prediction.

Each model and mode runs in a fresh process with an empty inductor cache (as a first run does).

    PYTHONPATH=src .venv/bin/python bench/bench_kernel_groups.py --models llama,vit,resnet --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(name: str, grouped: bool, size: str = "cpu", fraction: float = 0.5) -> dict:
    """Plan held-out ``name`` at ``fraction`` of its eager peak under remat's inductor backend; time its first step."""
    import torch

    import remat
    from remat.bench import heldout
    from remat.compiled import fusion
    from remat.measure import measure, training_step

    from torch._inductor.async_compile import AsyncCompile

    sources: set[str] = set()
    load, was = AsyncCompile.cpp_pybinding, fusion.GROUP_KERNELS

    def counted(self, argtypes, source_code):  # noqa: ANN001 - inductor's signature
        sources.add(source_code)
        return load(self, argtypes, source_code)

    AsyncCompile.cpp_pybinding, fusion.GROUP_KERNELS = counted, grouped
    try:  # (the smoke runs this in a test worker: nothing is left patched)
        torch._dynamo.reset()
        torch.manual_seed(0)
        held = heldout.build(name, "cpu", size)
        dtype = torch.bfloat16 if name == "llama" else None

        def task(net):
            return heldout.Task(net, held.kind, held.labels, dtype, "cpu")

        def peak(net):
            return measure(task(net), held.inputs, method="profiler", loss_fn=lambda loss: loss).peak

        budget = fraction * peak(held.model)
        be = remat.backend(budget=budget, solver="auto", compiler="inductor")
        net = heldout.Compiled(held.model, be, None, "remat")
        started = time.perf_counter()
        training_step(task(net), held.inputs, loss_fn=lambda loss: loss)()
        first = time.perf_counter() - started
        measured = peak(net)
    finally:
        AsyncCompile.cpp_pybinding, fusion.GROUP_KERNELS = load, was
    modules = len(sources)
    return {"model": name, "dtype": "bf16" if dtype else "fp32", "grouped": grouped,
            "first_step_seconds": round(first, 1), "modules": modules, "budget": budget, "measured_peak": measured,
            "predicted_peak": sum(r["predicted_peak"] for r in be.report),
            "planning_seconds": round(sum(r.get("planning_seconds") or 0 for r in be.report), 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="llama,vit,resnet")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "kernel_groups_cpu"))
    p.add_argument("--size", default="cpu", help="the held-out models' size (remat.bench.heldout.SIZES)")
    p.add_argument("--fraction", type=float, default=0.5, help="the budget, a fraction of the eager step's peak")
    p.add_argument("--modes", default="0,1", help="1: kernels grouped, 0: a C++ function per kernel")
    p.add_argument("--one", nargs=2, metavar=("MODEL", "GROUPED"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1] == "1", args.size, args.fraction)))
        return 0
    rows = []
    for name in args.models.split(","):
        for grouped in map(int, args.modes.split(",")):
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp()}  # a first run's compile
            run = subprocess.run([sys.executable, __file__, "--one", name, str(grouped), "--size", args.size,
                                  "--fraction", str(args.fraction)],
                                 env=env, capture_output=True, text=True)
            row = (json.loads(run.stdout.strip().splitlines()[-1]) if run.returncode == 0 else
                   {"model": name, "grouped": grouped, "error": run.stderr[-2000:]})
            print(json.dumps(row), flush=True)
            rows.append(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "PYTHONPATH=src .venv/bin/python bench/bench_kernel_groups.py " + " ".join(argv or sys.argv[1:])
    (out / "results.json").write_text(json.dumps({"command": command, "rows": rows}, indent=1))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
