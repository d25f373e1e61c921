"""The heap corruption of remat's inductor code on a small HF Falcon with several CPU threads
(docs/how-it-works.md, "An inductor fix carried by remat's compiles"): inductor's parallel scatter-add in a 2-D
tiled kernel wrote past its buffer (pytorch/pytorch#191837). ``remat.backend`` now compiles with the upstream fix
(``remat.compiled.inductor_fixes``). Exits 0 when eight steps run clean; on this 2-core machine
(2026-11-26) ``--simdlen 512`` crashed in 5 runs of 5 before the fix and ran clean in 4 of 4 after.

    PYTHONPATH=src .venv/bin/python bench/repro_falcon_threads.py [--budget 100%] [--threads 2] [--simdlen 512]
"""

from __future__ import annotations

import argparse
import faulthandler
import gc

import torch
import transformers

import remat
from remat.bench.heldout import raise_dynamo_limits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", default="100%")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--simdlen", type=int, default=None)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    faulthandler.enable()
    raise_dynamo_limits()
    torch.set_num_threads(args.threads)
    if args.simdlen:
        torch._inductor.config.cpp.simdlen = args.simdlen
    torch.manual_seed(0)
    cfg = transformers.FalconConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, vocab_size=256)
    model = transformers.FalconForCausalLM(cfg).train()
    ids = torch.randint(0, 256, (2, 32))
    net = torch.compile(model, backend=remat.backend(budget=args.budget, compiler="inductor"))
    for step in range(args.steps):
        net(input_ids=ids, labels=ids).loss.backward()
        for p in model.parameters():
            p.grad = None
        gc.collect()
        print(f"step {step}: ok", flush=True)


if __name__ == "__main__":
    main()
