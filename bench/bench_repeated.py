"""Graphs run several times a step, or compiled as steps of their own, under a byte budget
(``remat.compiled.chain``, ``backend``): blocks compiled one by one, as under FSDP2's per-block hooks.

Models: a 3-block residual MLP (tests/models.py ``MLPBlocks``, batch 256), its blocks alike (one
graph run three times a step) or of three widths (three graphs, each compiled as a step of its
own); the held-out HF Llama (``remat.bench.heldout``, 4 layers) with each decoder layer compiled
(one graph run four times; embedding and head eager). Each block gets one ``remat.backend`` at a
byte budget, a fraction of the eager step's measured peak; torch.compile per block (inductor's
own partitioner) beside it. Per point: the measured peak of a step after the planning ones (CPU
allocator replay, ``remat.measure`` "profiler"), the backend's predicted step peak over its
graphs' calls (``backend.step_peak``), what the graphs were planned as, the warnings remat gave,
and the median over interleaved rounds of the step time against eager.

    PYTHONPATH=src .venv/bin/python bench/bench_repeated.py --out bench/results/repeated_cpu_<commit>
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import torch  # noqa: E402
from torch import nn  # noqa: E402

import remat  # noqa: E402
from models import MLPBlocks  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.bench.steps import interleave, time_ratios  # noqa: E402
from remat.measure import measure  # noqa: E402


def _mlp(inners: tuple[int, ...]) -> Callable[[], tuple[nn.Module, Callable, list[nn.Module]]]:
    x = torch.randn(256, 16, generator=torch.Generator().manual_seed(0))

    def build() -> tuple[nn.Module, Callable, list[nn.Module]]:
        torch.manual_seed(0)
        model = MLPBlocks(inners)
        return model, lambda m: m(x).square().mean(), list(model.blocks)
    return build


def _llama(dtype: torch.dtype | None) -> Callable[[], tuple[nn.Module, Callable, list[nn.Module]]]:
    held = heldout.build("llama", "cpu", "cpu")

    def build() -> tuple[nn.Module, Callable, list[nn.Module]]:
        model = copy.deepcopy(held.model)
        task = heldout.Task(model, held.kind, held.labels, dtype, "cpu")
        return model, lambda m: task(**held.inputs), list(model.model.layers)
    return build


MODELS = {"mlp-alike": lambda: _mlp((256, 256, 256)), "mlp-widths": lambda: _mlp((192, 256, 320)),
          "llama-fp32": lambda: _llama(None), "llama-bf16": lambda: _llama(torch.bfloat16)}


def _step(model: nn.Module, loss: Callable) -> Callable[[], None]:
    params = [p for p in model.parameters() if p.requires_grad]

    def step() -> None:
        loss(model).backward()
        torch._foreach_zero_([p.grad for p in params if p.grad is not None])
    return step


def _compiled(build: Callable, backend: Any, steps: int = 4) -> tuple[Callable[[], None], list[str]]:
    """A training step of ``build()``'s model with each block compiled with ``backend``, after
    ``steps`` steps (the first records the graphs' calls; the next plan again: floors, then for
    good); and the warnings remat gave meanwhile."""
    torch._dynamo.reset()
    model, loss, blocks = build()
    for block in blocks:
        block.compile(backend=backend)
    step = _step(model, loss)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            step()
    return step, sorted({str(w.message)[:240] for w in caught if "remat" in str(w.message)})


def _timed(step: Callable[[], None], eager: Callable[[], None], rounds: int) -> dict[str, float]:
    times = interleave({"eager": eager, "method": step}, repeats=rounds, warmup=1)
    return {"time_ratio": time_ratios(times, "eager")["method"], "step_ms": 1e3 * statistics.median(times["method"])}


def run(name: str, compilers: list[str], fractions: list[float], rounds: int = 10) -> dict[str, Any]:
    """One model: eager's measured peak, torch.compile per block (inductor's own partitioner) and
    remat.backend per block at each byte budget and compiler."""
    build = MODELS[name]()
    model, loss, _ = build()
    eager = _step(model, loss)
    vanilla = measure(eager, (), method="profiler", warmup=1).peak
    step, _ = _compiled(build, "inductor")
    rows = [{"method": "torch.compile per block", "measured_peak": measure(step, (), method="profiler", warmup=1).peak,
             **_timed(step, eager, rounds)}]
    for compiler in compilers:
        for frac in fractions:
            budget = int(frac * vanilla)
            be = remat.backend(budget=budget, solver="auto", compiler=compiler)
            step, said = _compiled(build, be)
            peak = measure(step, (), method="profiler", warmup=1).peak
            rows.append({"method": f"remat {compiler} per block", "fraction": frac, "budget": budget,
                         "measured_peak": peak, "measured_of_budget": peak / budget,
                         "predicted_step_peak": be.step_peak, **_timed(step, eager, rounds),
                         "graphs": [{k: g[k] for k in ("calls_per_step", "chosen", "predicted_peak", "after_forward",
                                                       "recomputed_ops", "replans")} for g in be.report],
                         "warnings": said})
    return {"vanilla_peak": vanilla, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--budgets", default="0.8,0.7,0.6")
    ap.add_argument("--compilers", default="eager,inductor")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    heldout.raise_dynamo_limits()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"torch": torch.__version__, "command": " ".join(sys.argv), "models": {}}
    for name in args.models.split(","):
        got = result["models"][name] = run(name, args.compilers.split(","),
                                           [float(f) for f in args.budgets.split(",")], args.rounds)
        for r in got["rows"]:
            fit = (f"{r['measured_of_budget']:.3f} of {r['budget']}, graphs' step {r['predicted_step_peak']:.0f}, "
                   f"{[g['chosen'] for g in r['graphs']]}" if "budget" in r else "")
            print(f"{name:10s} {r['method']:26s} {r.get('fraction', ''):4} measured {r['measured_peak']} "
                  f"({r['measured_peak'] / got['vanilla_peak']:.3f} of eager), x{r['time_ratio']:.3f} eager {fit}",
                  flush=True)
        (out / "results.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
