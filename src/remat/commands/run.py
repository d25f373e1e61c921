"""``remat run TARGET --batch N --budget B --solver S [--mode M] [--json]``.

Optimizes a real model and trains it for a few steps next to the vanilla model, in one process:
measured peak (vanilla and optimized), predicted peak, step-time ratio (interleaved steps, median
of per-pair ratios after warm-up) and the gradient check (``torch.equal`` on every parameter's
gradient after one step of each from the same state and RNG seed).

TARGET is a zoo name (``remat.zoo.build(name, batch=N)``) or ``package.module:callable``
returning ``(model, inputs)`` (called with ``batch=N`` when ``--batch`` is given).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import platform
from typing import Any

import torch

from ._output import emit_json, table

NAME = "run"
HELP = "optimize a real model for a budget, then measure it against vanilla (memory, time, gradients)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="zoo name, or package.module:callable returning (model, inputs)")
    p.add_argument("--batch", type=int, default=None, help="batch size passed to the builder")
    p.add_argument("--budget", default="50%", help="bytes, a size ('2GiB') or a percentage of vanilla ('40%%')")
    p.add_argument("--solver", default="auto")
    p.add_argument("--mode", choices=["time", "memory"], default="time")
    p.add_argument("--cost", choices=["flops", "profile", "paper"], default="flops")
    p.add_argument("--repeats", type=int, default=5, help="timed step pairs after warm-up (>= 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def load_target(target: str, batch: int | None) -> tuple[Any, Any]:
    """(model, inputs) from a zoo name or ``module:callable``."""
    kwargs = {} if batch is None else {"batch": batch}
    if ":" in target:
        mod, _, fn = target.partition(":")
        try:
            builder = getattr(importlib.import_module(mod), fn)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"cannot load {target!r}: {e}") from None
        return builder(**kwargs)
    from .. import zoo

    if target not in zoo.names():
        raise ValueError(f"unknown target {target!r}: use a zoo name ({', '.join(zoo.names())}) "
                         f"or package.module:callable")
    return zoo.build(target, **kwargs)


def gradients_equal(model: torch.nn.Module, optimized: torch.nn.Module, reference: torch.nn.Module,
                    inputs: Any, seed: int = 0) -> bool:
    """One step of each from the same state and seed; every output and gradient bit-identical."""
    from ..measure import call, default_loss

    outs = []
    for m in (reference, optimized):
        m.zero_grad(set_to_none=True)
        torch.manual_seed(seed)
        out = call(m, inputs)
        default_loss(out).backward()
        outs.append(out)
    same_out = all(torch.equal(a, b) for a, b in zip(_leaves(outs[0]), _leaves(outs[1])))
    ref = dict(reference.named_parameters())
    same_grad = all((p.grad is None and ref[n].grad is None) or
                    (p.grad is not None and ref[n].grad is not None and torch.equal(p.grad, ref[n].grad))
                    for n, p in model.named_parameters())
    return same_out and same_grad


def _leaves(out: Any) -> list[torch.Tensor]:
    import torch.utils._pytree as pytree
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def run(args: argparse.Namespace) -> int:
    from ..measure import compare_times, measure, training_step
    from ..optimize import optimize

    model, inputs = load_target(args.target, args.batch)
    reference = copy.deepcopy(model)  # same parameters, same buffers: the gradient check's oracle
    optimized = optimize(model, inputs, args.budget, solver=args.solver, mode=args.mode, cost=args.cost)
    same = gradients_equal(model, optimized, reference, inputs)
    vanilla = measure(reference, inputs)
    opt = measure(optimized, inputs)
    times = compare_times(training_step(reference, inputs), training_step(optimized, inputs),
                          repeats=max(5, args.repeats))
    rep = optimized.report
    result = {
        "target": args.target, "batch": args.batch, "budget": rep["budget"], "solver": rep["solver"],
        "mode": args.mode, "vanilla_measured_peak": vanilla.peak, "optimized_measured_peak": opt.peak,
        "vanilla_predicted_peak": rep["vanilla_predicted_peak"], "predicted_peak": rep["predicted_peak"],
        "method": opt.method, "time_ratio": times["ratio"], "vanilla_step_seconds": times["a_seconds"],
        "optimized_step_seconds": times["b_seconds"], "gradients_identical": same,
        "graph_nodes": len(optimized.graph), "kept": rep["kept"],
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__},
    }
    if args.json:
        emit_json(result)
        return 0 if same else 1
    rows = [(k, result[k]) for k in ("solver", "budget", "vanilla_measured_peak", "optimized_measured_peak",
                                     "vanilla_predicted_peak", "predicted_peak", "time_ratio",
                                     "gradients_identical")]
    table(f"remat run {args.target} (peaks in bytes, measured by {opt.method})", ["field", "value"], rows)
    return 0 if same else 1
