"""Plans that persist, several input signatures planned up front, re-plans that hold the budget.

``remat.optimize(model, inputs, budget, plan_cache="plans/")`` stores each plan it makes as one
JSON file in ``plans/``, named by a hash of what the plan depends on:

- the model's structure: every module's path and class, every parameter's and buffer's name,
  shape, dtype and ``requires_grad``;
- the input signature and the autocast state (``compiled.module.plan_key``: shapes, dtypes,
  devices, constants, train/eval flags, autocast device types and dtypes);
- the budget as parsed (bytes, or the fraction of the vanilla peak), the solver, mode and cost;
- the torch version and this file's format.

A later call with the same key loads the plan and its report and traces the step once (seconds,
no solver, no measured steps). The stored plan carries the fingerprint of the joint graph it was
made for (``partitioner.fingerprint``); if the traced graph differs (the model's code changed
under the same structure) it is re-planned, the file replaced, and a warning says so.

``shapes=[inputs2, inputs3]`` plans more signatures up front, each as the first. A signature
first seen in training (a last smaller batch) goes through the same path (``CompiledModule.replan``):
its own measured vanilla peak is the base of a percentage, the check step runs, the plan is
cached, and ``module.report`` (and ``module.reports[key]``) describe the inputs it was made for
(``report.extra["inputs"]``).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

FORMAT = 1


def structure(model: nn.Module) -> str:
    """The model's structure as text: module paths and classes, parameter and buffer specs."""
    lines = [f"{name}:{type(m).__module__}.{type(m).__qualname__}" for name, m in model.named_modules()]
    lines += [f"p {name} {tuple(p.shape)} {p.dtype} {p.requires_grad}" for name, p in model.named_parameters()]
    lines += [f"b {name} {tuple(b.shape)} {b.dtype}" for name, b in model.named_buffers()]
    return "\n".join(lines)


def cache_key(model: nn.Module, args: tuple, kwargs: dict, budget: Any, solver: str, mode: str, cost: str,
              gradients: str = "auto", search: Any = None) -> str:
    """The file name (without ``.json``) of the plan for these inputs and settings."""
    from .budget import parse
    from .compiled.module import plan_key
    from .compiled.searching import cache_term

    b = parse(budget)
    parts = [f"format {FORMAT}", f"torch {torch.__version__}", structure(model), repr(plan_key(model, args, kwargs)),
             f"budget {'relative' if b.relative else 'bytes'} {b.value!r}", f"solver {solver}", f"mode {mode}",
             f"cost {cost}"] + ([f"gradients {gradients}"] if gradients != "auto" else []) \
        + ([f"search {term}"] if (term := cache_term(search)) else [])
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


class PlanCache:
    """A directory of plans, one JSON file per key (written atomically: ranks may share it)."""

    def __init__(self, directory: Any) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def load(self, key: str, kinds: tuple[str, ...] = ("plan",)) -> dict | None:
        """The entry stored under ``key`` holding one of ``kinds`` (a plan; the backend's: or a refusal),
        None when there is none (or it is unreadable: a warning says so)."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            warnings.warn(f"remat: cannot read the cached plan {path} ({e}); planning again", stacklevel=4)
            return None
        return (entry if isinstance(entry, dict) and entry.get("format") == FORMAT and any(k in entry for k in kinds)
                else None)

    def store(self, key: str, entry: dict) -> Path:
        path = self.path(key)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"format": FORMAT, **entry}, indent=1, default=_jsonable))
        os.replace(tmp, path)
        return path


def optimize_signatures(model: nn.Module, example_inputs: Any, budget: Any, solver: str, mode: str, cost: str,
                        verify: bool, rounds: int, tolerance: float, *, plan_cache: Any, shapes: Any, plan: Any,
                        one: Callable[..., nn.Module], gradients: str = "auto", search: Any = None) -> nn.Module:
    """``remat.optimize``'s compiled path over signatures: the first (``example_inputs``, or the
    stored ``plan``), each of ``shapes``, and later any new one (``replan``); ``one`` plans one."""
    from .capture import split_inputs
    from .compiled.module import plan_key
    from .compiled.partitioner import StalePlanError
    from .errors import InputError
    from .plan import Plan

    cache = PlanCache(plan_cache) if plan_cache is not None else None
    given = Plan.load(plan) if isinstance(plan, (str, os.PathLike)) else plan
    if given is not None and not isinstance(given, Plan):
        raise InputError(f"plan must be a remat.Plan or the path of one saved with plan.save(path), "
                         f"got {type(plan).__name__}")

    def plan_one(inputs: Any, stored: Plan | None = None) -> nn.Module:
        args, kwargs = split_inputs(inputs)
        if stored is not None:
            try:
                return _loaded(model, args, kwargs, stored, None, budget, solver, mode, cost, "the plan given",
                               gradients, search)
            except StalePlanError as e:
                raise InputError(f"remat.optimize(plan=...): {e}: optimize without it to plan again") from e
        key = cache_key(model, args, kwargs, budget, solver, mode, cost, gradients, search) if cache is not None else None
        entry = cache.load(key) if cache is not None else None
        if entry is not None:
            try:
                return _loaded(model, args, kwargs, Plan.from_json(entry["plan"]), entry.get("report"), budget,
                               solver, mode, cost, f"plan cache {cache.path(key)}", gradients, search)
            except StalePlanError as e:
                warnings.warn(f"remat: the cached plan {cache.path(key)} does not fit: {e}. Planning again and "
                              f"replacing it", stacklevel=3)
        module = one(model, inputs, budget, solver, mode, cost, verify, rounds, tolerance, gradients=gradients,
                     search=search)
        _describe(module, args, kwargs)
        if cache is not None:
            path = cache.store(key, {"plan": module.plan.to_json(), "report": _report_json(module.report),
                                     "inputs": module.report.extra.get("inputs")})
            module.report.extra["plan_cache"] = f"stored {path}"
        module.reports[plan_key(model, args, kwargs)] = module.report
        return module

    first = plan_one(example_inputs, given)
    for inputs in shapes or ():
        args, kwargs = split_inputs(inputs)
        if plan_key(model, args, kwargs) not in first._steps:
            first.adopt(plan_one(inputs))
    first.replan = plan_one
    return first


def _loaded(model: nn.Module, args: tuple, kwargs: dict, plan: Any, report: dict | None, budget: Any, solver: str,
            mode: str, cost: str, source: str, gradients: str = "auto", search: Any = None) -> nn.Module:
    """A CompiledModule running a stored plan (traced once, nothing planned or measured)."""
    from .compiled.module import CompiledModule, plan_key
    from .compiled.partitioner import Planner

    device = next((p.device for p in model.parameters()), None)
    name = type(model).__name__
    module = CompiledModule(model, lambda: Planner(budget, solver, mode, cost, device=device, name=name,
                                                   gradients=gradients, search=search))
    step = module.compile_for(args, kwargs, Planner(budget, solver, mode, cost, device=device, name=name, plan=plan,
                                                    gradients=gradients, search=search))
    module.report = _restore_report(report) or _fresh_report(step, name)
    step.eager = module.report.executor == "eager"  # stored from a step that runs the model as is
    module.report.compile_seconds = step.compile_seconds
    module.report.planning_seconds = 0.0
    module.report.notes = [*module.report.notes, f"plan loaded from {source}, not planned"]
    module.report.extra["plan_cache"] = f"loaded {source}"
    _describe(module, args, kwargs)
    module.reports[plan_key(model, args, kwargs)] = module.report
    return module


def _describe(module: nn.Module, args: tuple, kwargs: dict) -> None:
    from .compiled.module import describe

    module.report.extra["inputs"] = describe(args, kwargs)


def _report_json(report: Any) -> dict:
    return json.loads(json.dumps(report.to_json(), default=_jsonable))


def _restore_report(data: dict | None) -> Any:
    from .report import Report

    if not data:
        return None
    try:
        return Report(**data)
    except TypeError:  # written by another version of Report
        return None


def _fresh_report(step: Any, name: str) -> Any:
    """The report of a step run from a stored plan with no stored report (``optimize(plan=...)``)."""
    from .report import build

    p = step.planned
    record = {"executor": "compiled", **p.summary()}
    record.update(budget=p.budget, vanilla_predicted_peak=p.vanilla, compile_seconds=step.compile_seconds,
                  solver=p.plan.stats.get("chosen", p.plan.solver), mode=p.plan.mode or "time",
                  kept=len(p.split.saved), tried=[], dropped_outputs=list(step.flat.dropped))
    return build(record, p.joint.graph, p.steps, name)


def _jsonable(x: Any) -> Any:
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    if hasattr(x, "item"):
        return x.item()
    return str(x)
