"""The plan a GPU would get, made on the CPU: HF Llama planned by ``remat.backend`` (inductor, bf16
autocast) with a GPU's roofline figures (``costs.DEVICES``) in place of the CPU's, so that what a plan
recomputes, and how inductor's scheduler fuses it, can be read without a GPU. Only the figures are the
GPU's: the walk and the generated kernels are the CPU's, and nothing here is timed.

    .venv/bin/python bench/gpu_probe/plan_as_gpu.py OUT [--gpu H200] [--layers 16] [--hidden 1024]
        [--batch 1] [--seq 1024] [--budget 50%]

Writes OUT/plan.txt (``inductor_gap.plan_text``: each recomputed value, its op, count and bytes, and the
backward's fx code), OUT/report.json (the backend's report) and OUT/kernels.txt (per backward kernel of
the generated code: how many times it is called and how many buffers it reads and writes, the widest
first). Takes about 2.5 minutes at the defaults (one sequence of 1024 tokens) on two cores.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="plan_as_gpu_"))
import torch  # noqa: E402

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "src"), str(Path(__file__).parent)]
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.compiled import costs  # noqa: E402

from inductor_gap import plan_text  # noqa: E402


def kernel_table(code: str) -> list[dict]:
    """Each C++ kernel of an inductor output module: name, calls, buffers read (const pointers) and
    written (the other pointers), the widest first."""
    rows = []
    for m in re.finditer(r"^(cpp_fused\w*) = async_compile\.cpp_pybinding\(\[([^\]]*)\]", code, re.M):
        name, args = m.group(1), m.group(2)
        pointers = re.findall(r"'([^']*)\*'", args)  # buffers; scalars (a dynamic size's ``const int64_t``) are not
        reads = sum(t.startswith("const ") for t in pointers)
        rows.append({"kernel": name, "calls": len(re.findall(rf"^\s+{name}\(", code, re.M)),
                     "reads": reads, "writes": len(pointers) - reads})
    return sorted(rows, key=lambda r: -(r["reads"] + r["writes"]))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--gpu", default="H200", choices=sorted(k for k in costs.DEVICES if k != "cpu"))
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--budget", default="50%")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from transformers import LlamaConfig, LlamaForCausalLM

    figures = costs.DEVICES[args.gpu]
    costs.device_figures = lambda device=None: figures  # the GPU's peaks, wherever the values live
    torch.manual_seed(0)
    cfg = LlamaConfig(num_hidden_layers=args.layers, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                      num_attention_heads=16, vocab_size=32000)
    held = heldout._lm("llama", LlamaForCausalLM(cfg), "LlamaForCausalLM", args.batch, args.seq, "cpu", 0)
    heldout.raise_dynamo_limits()
    be = remat.backend(budget=args.budget, solver="auto", compiler="inductor", cost="roofline")
    task = heldout.Task(heldout.Compiled(held.model, be, None, "plan_as_gpu"), held.kind, held.labels,
                        torch.bfloat16, "cpu")
    t0 = time.perf_counter()
    task(**held.inputs).backward()
    print(f"planned, compiled and stepped in {time.perf_counter() - t0:.0f} s", flush=True)
    (out / "report.json").write_text(json.dumps({"args": vars(args), "figures": figures, "report": be.report},
                                                indent=1, default=str))
    (out / "plan.txt").write_text("\n\n".join(plan_text(p) for p in be.planner.planned))
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    modules = [f.read_text() for f in Path(cache_dir()).rglob("*.py") if "def call(" in f.read_text()]
    lines = []
    for code in modules:
        table = kernel_table(code)
        if any("backward" in r["kernel"] for r in table):  # the backward's module
            lines += [f"{r['kernel'][:100]:100s} calls {r['calls']:3d} reads {r['reads']:3d} writes {r['writes']:3d}"
                      for r in table]
    (out / "kernels.txt").write_text("\n".join(lines) + "\n")
    for r in be.report:
        print({k: r.get(k) for k in ("chosen", "budget", "predicted_peak", "recompute_fraction", "recompute_time")})
    print("\n".join(lines[:5]))


if __name__ == "__main__":
    main()
