"""A held-out HF language model (Llama or GPT-2) under FSDP2's usual layout (``fully_shard`` per
decoder layer, then the model) and ``torch.compile``: plain FSDP2, torch.compile with inductor,
and ``remat.backend`` at a percentage and at a byte budget. Two CPU processes on gloo; each rank
its own batch, dropout seeded alike for every method.

Per method (rank 0's figures): the graphs dynamo made and how often each ran a step, gradients
against plain FSDP2 after one step from the same weights (max over parameters of max|g - g_ref| /
max|g_ref|, full tensors), the measured peak of a step (CPU allocator replay, ``remat.measure``
"profiler"; FSDP's gathered parameters and reduce-scatter buffers included), the backend's
predicted peak over its graphs' calls (``backend.step_peak``), and the median step time over
interleaved rounds against plain FSDP2.

    PYTHONPATH=src .venv/bin/python bench/bench_fsdp.py --model llama --dtype bf16 --out bench/results/fsdp_cpu_<commit>
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

WORLD = 2


def _worker(rank: int, init: str, args: argparse.Namespace, out: str) -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    import remat
    from remat.bench import heldout
    from remat.bench.steps import interleave, time_ratios
    from remat.measure import measure
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (WORLD,))
    held = heldout.build(args.model, "cpu", args.size, seed=0)
    dtype = torch.bfloat16 if args.dtype == "bf16" else None
    ids = torch.randint(0, held.model.config.vocab_size, held.inputs["input_ids"].shape,
                        generator=torch.Generator().manual_seed(100 + rank))
    heldout.raise_dynamo_limits()

    def sharded() -> torch.nn.Module:
        m = copy.deepcopy(held.model)
        for layer in [x for x in m.modules() if heldout.is_hf_layer(x)]:  # the decoder layers
            fully_shard(layer, mesh=mesh)
        return fully_shard(m, mesh=mesh)

    def step_of(m: Any) -> Any:
        def step() -> None:
            torch.manual_seed(rank)  # the same dropout draws for every method
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
        return step

    def grads(m: torch.nn.Module) -> list[torch.Tensor]:
        got = [p.grad.full_tensor() if type(p.grad).__name__ == "DTensor" else p.grad for p in m.parameters()]
        m.zero_grad(set_to_none=True)
        return got

    ref = sharded()
    step_of(ref)()
    reference = grads(ref)
    methods: dict[str, Any] = {"FSDP2": (ref, None)}
    methods["torch.compile"] = (sharded(), "inductor")
    for budget in args.budgets.split(","):
        for compiler in args.compilers.split(","):
            methods[f"remat {compiler} {budget}"] = (sharded(), (budget, compiler))
    rows: dict[str, dict[str, Any]] = {}
    steps = {}
    vanilla = None
    for name, (model, how) in methods.items():
        be = None  # (no dynamo reset between methods: each keeps its compiled code for the timed rounds)
        if how is None:
            runner = model
        elif how == "inductor":
            runner = torch.compile(model, backend="inductor")
        else:
            budget, compiler = how
            budget = float(budget) * vanilla if not budget.endswith("%") else budget
            be = remat.backend(budget=budget, solver="auto", compiler=compiler)
            runner = torch.compile(model, backend=be)
        step = steps[name] = step_of(runner)
        row = rows[name] = {}
        if how is not None:
            step()  # the first step records the graphs' calls
            diff = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
                       for a, b in zip(grads(model), reference))
            row["grad_diff"] = diff
            for _ in range(3):  # plans made again (floors, then for good) on the steps after
                step()
            model.zero_grad(set_to_none=True)
        row["peak"] = measure(step, (), method="profiler", warmup=1).peak
        model.zero_grad(set_to_none=True)
        if vanilla is None:
            vanilla = row["peak"]
        if be is not None:
            row["budget"] = be.planner.budget
            row["step_peak"] = be.step_peak
            row["graphs"] = [{k: g[k] for k in ("calls_per_step", "chosen", "predicted_peak", "after_forward",
                                                "recomputed_ops", "replans")} for g in be.report]
    times = interleave(steps, repeats=args.rounds, warmup=1)
    for name, r in time_ratios(times, "FSDP2").items():
        rows[name]["time_ratio"] = r
        rows[name]["step_ms"] = 1e3 * statistics.median(times[name])
    if rank == 0:
        Path(out).write_text(json.dumps({"vanilla_peak": vanilla, "rows": rows, "source": held.source}, indent=1))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama", choices=("llama", "gpt2"))
    ap.add_argument("--size", default="cpu", help="heldout size: cpu (4 layers, hidden 128) or quick")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--budgets", default="50%,0.7,0.5", help="percentages, or fractions of plain FSDP2's peak")
    ap.add_argument("--compilers", default="eager,inductor")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch.multiprocessing as mp

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_worker, args=(f"file://{os.path.join(d, 'init')}", args, os.path.join(d, "r.json")), nprocs=WORLD)
        result = json.loads(Path(d, "r.json").read_text())
    result.update(command=" ".join(sys.argv), torch=torch.__version__, dtype=args.dtype, model=args.model)
    (out / f"results_{args.model}_{args.dtype}.json").write_text(json.dumps(result, indent=1))
    v = result["vanilla_peak"]
    for name, r in result["rows"].items():
        fit = f", graphs' step {r['step_peak']:.0f}, budget {r['budget']}" if "step_peak" in r else ""
        calls = f", calls {[g['calls_per_step'] for g in r['graphs']]}" if "graphs" in r else ""
        print(f"{name:24s} peak {r['peak']} ({r['peak'] / v:.3f}), x{r['time_ratio']:.3f}, "
              f"grads {r.get('grad_diff', 0):.1e}{calls}{fit}")


if __name__ == "__main__":
    main()
