"""``remat fit MODEL --budget 24GiB [--device-memory H100] [--vary batch|seq_len] [--json]``.

Finds the largest batch size (or sequence length, --vary seq_len) whose training step fits,
vanilla and with remat, by bisection on fake tensors: the model is built on the meta device and
traced, so no memory is allocated and a CPU-only machine answers for a GPU. Prints both sizes,
their peaks and the remat plan's predicted time ratio.

MODEL is a zoo name (resnet50), package.module:callable returning (model, inputs) when called
with batch=N (or the --vary name), or hf:NAME, a Hugging Face causal LM built from its config
alone (hf:gpt2 from the Hugging Face cache, or hf:./folder with a config.json).

The budget is for activations: bytes or a size (24GiB); not a percentage, since the vanilla peak
changes with the size. --device-memory names a device (H100, A100-40GB, L4, ...) or gives its
memory (80GiB): the budget is then what is left of it after the parameters, buffers, gradients,
optimizer states (--optimizer adam: 2 per parameter), the inputs and --reserve (default 1GiB);
given both, the smaller applies. Exit code 1 when not even size 1 fits with remat.
"""

from __future__ import annotations

import argparse
from typing import Any

from ._output import add_json_arguments, emit_json
from .solve import add_solver_argument

NAME = "fit"
HELP = "the largest batch (or sequence length) that fits a budget or a device, vanilla and with remat"

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..devices import DEVICES

    p.add_argument("model", help="zoo name, package.module:callable, or hf:NAME (a Hugging Face causal LM config)")
    p.add_argument("--budget", default=None, help="activation budget: bytes or a size (24GiB, 512MB)")
    p.add_argument("--device-memory", default=None, metavar="DEVICE",
                   help=f"a device ({', '.join(DEVICES)}) or its memory (80GiB): the budget is what the step "
                        f"leaves of it")
    p.add_argument("--vary", default="batch",
                   help="what to maximize: batch (default), seq_len, or the keyword a callable takes")
    p.add_argument("--batch", type=int, default=None, help="the batch size, when --vary is not batch")
    p.add_argument("--seq-len", type=int, default=None, help="the sequence length, when --vary is not seq_len")
    p.add_argument("--optimizer", default="adam",
                   help="states per parameter: adam/adamw (2, default), momentum (1), sgd (0), or a number")
    p.add_argument("--reserve", default=None,
                   help="memory held back from --device-memory: CUDA context, allocator slack (default 1GiB)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                   help="convert floating parameters and inputs to this dtype first (default: as built)")
    add_solver_argument(p, "auto")
    p.add_argument("--mode", choices=["time", "memory"], default="time")
    p.add_argument("--max", type=int, default=2**20, dest="cap", help="largest size tried (default 1048576)")
    add_json_arguments(p, full="every size traced")


def run(args: argparse.Namespace) -> int:
    import torch

    from ..errors import InputError
    from ..fit import builder, fit

    if args.budget is None and args.device_memory is None:
        raise InputError("remat fit needs --budget (a size: 24GiB) or --device-memory (a device: H100, or 80GiB)")
    fixed: dict[str, Any] = {}
    if args.batch is not None and args.vary != "batch":
        fixed["batch"] = args.batch
    if args.seq_len is not None and args.vary != "seq_len":
        fixed["seq_len"] = args.seq_len
    model_fn = builder(args.model, args.vary, fixed)
    dtype = getattr(torch, DTYPES[args.dtype]) if args.dtype else None
    result = fit(model_fn, args.budget, device_memory=args.device_memory, reserve=args.reserve,
                 optimizer=args.optimizer, solver=args.solver, mode=args.mode, dtype=dtype, cap=args.cap,
                 vary=args.vary, name=args.model)
    if args.json or getattr(args, "json_full", False):
        record = result.to_json()
        if not getattr(args, "json_full", False):
            record.pop("probes")
        emit_json(record, full=getattr(args, "json_full", False))
    else:
        print(result)
    return 0 if result.remat else 1
