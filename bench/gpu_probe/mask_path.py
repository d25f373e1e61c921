"""Eager remat "100%" captured with torch.compile's flag on (before 2768c0a: transformers < 5.24 then builds a
causal mask and attention runs with it) and on eager's path (since), against vanilla: bf16 autocast, the held-out
benchmark's sizes for the device, 15 interleaved rounds, medians as ratios to vanilla's.

    PYTHONPATH=<transformers 5.17> .venv/bin/python bench/gpu_probe/mask_path.py llama     # CPU
    DEVICE=cuda python3 bench/gpu_probe/mask_path.py gpt2                                   # a lent GPU
"""
import copy
import os
import statistics
import sys

import torch

sys.path.insert(0, "src")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformers  # noqa: E402
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.compiled.module import _compiling  # noqa: E402

from overhead import interleaved  # noqa: E402

DEVICE = os.environ.get("DEVICE", "cpu")
sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
name = sys.argv[1]
held = heldout.build(name, DEVICE, "gpu" if DEVICE == "cuda" else "cpu")
with heldout.autocast(DEVICE, torch.bfloat16):
    new = remat.optimize(held.model, held.inputs, "100%", verify=False)
    with _compiling():
        old = remat.optimize(copy.deepcopy(held.model), held.inputs, "100%", verify=False)
nets = {"vanilla": held.model, "remat 100% (flag on: mask)": old, "remat 100% (eager path)": new}
steps = {}
for k, net in nets.items():
    task = heldout.Task(net, held.kind, held.labels, torch.bfloat16, DEVICE)
    params = [p for p in net.parameters() if p.requires_grad]
    def step(task=task, params=params):
        task(**held.inputs).backward()
        for p in params:
            p.grad = None
    step()
    steps[k] = step
ts = interleaved(steps, 15, sync)
base = statistics.median(ts["vanilla"])
ratios = {k: round(statistics.median(v) / base, 3) for k, v in ts.items()}
print(transformers.__version__, DEVICE, name, ratios, f"vanilla {base:.1f} ms")
