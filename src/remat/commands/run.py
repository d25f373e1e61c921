"""``remat run TARGET --batch N --budget B --solver S [--mode M] [--json]``.

Optimizes a real model and trains it for a few steps next to the vanilla model, in one process:
measured peak (vanilla and optimized), predicted peak, step-time ratio (interleaved steps, median
of per-pair ratios after warm-up) and the gradient check (``torch.equal`` on every parameter's
gradient after one step of each from the same state and RNG seed).

TARGET is a zoo name (``remat.zoo.build(name, batch=N)``) or ``package.module:callable``
returning ``(model, inputs)`` (called with ``batch=N`` when ``--batch`` is given). The budget is
bytes, a size (4GiB, 512MB), a percentage of the measured vanilla peak (40%) or a fraction of it
(0.4). Exit code 1 when no plan meets the budget or the gradients differ, 2 on an error.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import platform
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from .. import progress
from ..errors import InputError
from ._output import add_json_arguments, emit_json, fmt, percent, seconds, size, table
from .solve import add_solver_argument

NAME = "run"
HELP = "optimize a real model for a budget, then measure it against vanilla (memory, time, gradients)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="zoo name, or package.module:callable returning (model, inputs)")
    p.add_argument("--batch", type=int, default=None, help="batch size passed to the builder")
    p.add_argument("--budget", default="50%",
                   help="bytes, a size (4GiB, 512MB), a percentage of the vanilla peak (40%%) or a fraction of "
                        "it (0.4); default 50%%")
    add_solver_argument(p, "auto")
    p.add_argument("--mode", choices=["time", "memory"], default="time")
    p.add_argument("--cost", choices=["auto", "flops", "roofline", "profile", "paper"], default="auto",
                   help="op cost model for planning: flops, roofline (seconds from the device's peak FLOP/s "
                        "and bandwidth), profile (each distinct op timed once on the device, cached in "
                        "$REMAT_CACHE_DIR), paper, auto (default: profile on CUDA, roofline elsewhere)")
    p.add_argument("--repeats", type=int, default=5, help="timed step pairs after warm-up (>= 5)")
    add_json_arguments(p, full="the plan's full report (every candidate tried)")


def load_target(target: str, batch: int | None) -> tuple[Any, Any]:
    """(model, inputs) from a zoo name or ``module:callable``."""
    kwargs = {} if batch is None else {"batch": batch}
    if ":" in target:
        mod, _, fn = target.partition(":")
        import os
        import sys

        if os.getcwd() not in sys.path and "" not in sys.path:  # the console script's path lacks it
            sys.path.insert(0, os.getcwd())
        try:
            builder = getattr(importlib.import_module(mod), fn)
        except (ImportError, AttributeError) as e:
            raise InputError(f"cannot load {target!r}: {e}: give package.module:callable importable from "
                             f"here (the current folder is on the path)") from None
        with progress.task(f"building {target}"):
            return builder(**kwargs)
    from .. import zoo

    if target not in zoo.names():
        raise InputError(f"unknown target {target!r}: use a zoo name ({', '.join(zoo.names())}) "
                         f"or package.module:callable")
    with progress.task(f"building {target}"):
        return zoo.build(target, **kwargs)


def gradients_equal(model: torch.nn.Module, optimized: torch.nn.Module, reference: torch.nn.Module,
                    inputs: Any, seed: int = 0) -> bool:
    """One step of each from the same state and seed; every output and gradient bit-identical."""
    import torch

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
    import torch
    import torch.utils._pytree as pytree

    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def report_dict(report: Any) -> dict[str, Any]:
    """The optimized module's report as a dict, whatever its type (dict or dataclass)."""
    import dataclasses

    if isinstance(report, dict):
        return report
    if dataclasses.is_dataclass(report):
        return dataclasses.asdict(report)
    return dict(vars(report))


def run(args: argparse.Namespace) -> int:
    import torch

    from ..budget import parse
    from ..measure import compare_times, measure, training_step
    from ..optimize import optimize

    parse(args.budget, "--budget")  # refused before the model is built
    if args.repeats < 1:
        raise InputError(f"--repeats must be at least 1, got {args.repeats}: the default is 5")
    if args.batch is not None and args.batch < 1:
        raise InputError(f"--batch must be a positive batch size, got {args.batch}")
    model, inputs = load_target(args.target, args.batch)
    reference = copy.deepcopy(model)  # same parameters, same buffers: the gradient check's oracle
    optimized = optimize(model, inputs, args.budget, solver=args.solver, mode=args.mode, cost=args.cost)
    with progress.task("checking gradients against the vanilla model"):
        same = gradients_equal(model, optimized, reference, inputs)
    # measured as optimize measured them when it resolved the budget (on the CPU the allocator level,
    # temporaries inside ops included): the budget, its percentage and the peaks are then one scale
    method = report_dict(optimized.report).get("method") or "auto"
    with progress.task("measuring the peaks of both steps", total=2) as bar:
        vanilla = measure(reference, inputs, method=method)
        bar.advance()
        opt = measure(optimized, inputs, method=method)
        bar.advance()
    with progress.task(f"timing both steps ({max(5, args.repeats)} pairs after warm-up)"):
        times = compare_times(training_step(reference, inputs), training_step(optimized, inputs),
                              repeats=max(5, args.repeats))
    rep = report_dict(optimized.report)
    result = {
        "target": args.target, "batch": args.batch, "budget": rep.get("budget"), "solver": rep.get("solver"),
        "mode": args.mode, "cost": rep.get("cost") or args.cost, "vanilla_measured_peak": vanilla.peak, "optimized_measured_peak": opt.peak,
        "vanilla_predicted_peak": rep.get("vanilla_predicted_peak"), "predicted_peak": rep.get("predicted_peak"),
        "method": opt.method, "time_ratio": times["ratio"], "vanilla_step_seconds": times["a_seconds"],
        "optimized_step_seconds": times["b_seconds"], "gradients_identical": same,
        "graph_nodes": len(optimized.graph), "kept": rep.get("kept"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__},
    }
    if args.json_full:
        result["report"] = rep
    if args.json or args.json_full:
        emit_json(result, full=args.json_full)
        return 0 if same else 1
    base = vanilla.peak
    cost = result["cost"] + (" (auto)" if args.cost == "auto" and result["cost"] != "auto" else "")
    rows = [("solver", fmt(result["solver"])),
            ("cost model", cost),
            ("budget", f"{size(result['budget'])} ({percent(result['budget'], base)})"),
            ("vanilla peak, measured", size(base)),
            ("optimized peak, measured", f"{size(opt.peak)} ({percent(opt.peak, base)})"),
            ("vanilla peak, simulated (values only)", size(result["vanilla_predicted_peak"])),
            ("optimized peak, predicted", size(result["predicted_peak"])),
            ("step time ratio", f"{times['ratio']:.3f}x ({seconds(times['b_seconds'])} vs "
                                f"{seconds(times['a_seconds'])})"),
            ("gradients identical", fmt(same))]
    table(f"remat run {args.target} (peaks measured by {opt.method}; % of the vanilla peak)",
          ["field", "value"], rows)
    return 0 if same else 1
