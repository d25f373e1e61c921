"""MEASURED tables of the suite: real training steps on this machine's CPU, or on its GPU.

- ``table1_measured``: seed 000 Table 1's methods executed with ``remat.optimize`` on the real
  zoo model, at a batch and image size this CPU runs quickly (the suite says which). Each row
  has the predicted peak (``remat.simulate`` on the captured graph at the same size), the
  measured peak by CPU live-storage tracking (``remat.measure``) and by the profiler method
  (``steps.profiler_peak``), and the step time as a ratio to the vanilla step of the same run
  (round-robin over all methods, median of per-round ratios, DESIGN.md's protocol).
- ``tradeoff_measured``: remat's solvers over a budget sweep and the peers (``peers.py``:
  per-block checkpointing, torch.compile's activation_memory_budget) in one run, all measured
  with the profiler method, since torch.compile cannot be measured under a dispatch mode.

On CUDA (``Tools.default(device="cuda")``, the ``gpu`` suite) the allocator-level figure is the
CUDA allocator's peak (``remat.measure`` method "cuda", field ``cuda_peak``) instead of the CPU
profiler replay (``profiler_peak``); ``ALLOCATOR`` names the method of each device.

The pieces this uses (zoo, capture, optimize, measure) come in a ``Tools`` value, so tests
substitute small fakes; a missing piece turns the affected figures into rows that say so.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from torch import nn

from . import peers
from .steps import Step, interleave, measured_peak, time_ratios, train_step
from .tables import Method, Progress, _quiet

MEASURED_METHODS = (
    Method("vanilla", "none", minimal=False),
    Method("chen", "chen-greedy", minimal=False),
    Method("reforward", "reforward", minimal=False),
    Method("approx-tc", "dp-approx", "time"),
    Method("approx-mc", "dp-approx", "memory"),
)
# Solvers whose own schedules the runtime follows step by step (a value recomputed more than
# once): seed 004's TWRemat, and the MILP yardstick on graphs it solves in about a minute.
SCHEDULE_METHODS = (
    Method("twremat", "twremat"),
    Method("milp", "milp", max_nodes=60),
)


@dataclass(frozen=True)
class Tools:
    """The library pieces measured runs need; ``None`` where a piece is not available."""

    build: Callable[..., tuple[nn.Module, tuple]]
    loss: Callable[[Any], Any]
    optimize: Callable[..., nn.Module] | None = None
    measure: Callable[..., Any] | None = None
    capture: Callable[..., Any] | None = None
    min_budget: Callable[..., float] | None = None
    # (graph, budget, solver, mode) -> (the solver's own peak, the predicted peak of the step run)
    predict: Callable[..., tuple[float, float]] | None = None

    @classmethod
    def default(cls, device: str = "cpu") -> "Tools":
        """The library's own pieces; models and inputs are built on ``device``."""
        import remat
        from remat import zoo

        def predict(graph: Any, budget: float | None, solver: str, mode: str) -> tuple[float, float]:
            plan = remat.solve(graph, budget, solver=solver, mode=mode)
            try:  # the schedule the runtime executes for the kept set (recompute on demand)
                from remat.runtime import predict as executed
                return plan.peak, executed(graph, plan).peak
            except ImportError:
                return plan.peak, remat.simulate(graph, plan).peak

        return cls(build=functools.partial(zoo.build, device=device), loss=zoo.loss, optimize=_library("optimize"),
                   measure=_library("measure"), capture=_library("capture"),
                   min_budget=remat.min_budget, predict=predict)

    def missing(self) -> list[str]:
        return [n for n in ("optimize", "capture") if getattr(self, n) is None]


def _library(name: str) -> Callable[..., Any] | None:
    """``remat.<name>``, or the function ``<name>`` of module ``remat.<name>``; None if absent."""
    import importlib
    import types

    import remat

    found = getattr(remat, name, None)
    if found is None:
        try:
            found = importlib.import_module(f"remat.{name}")
        except ImportError:
            return None
    if isinstance(found, types.ModuleType):
        found = getattr(found, name, None)
    return found if callable(found) else None


# the allocator-level measurement method of each device type, and the row field of each method
ALLOCATOR = {"cpu": "profiler", "cuda": "cuda"}
PEAK_FIELD = {"tracker": "storage_peak", "profiler": "profiler_peak", "cuda": "cuda_peak"}


@dataclass(frozen=True)
class Size:
    """Where a measured run is taken: batch and (for image nets) the image side."""

    batch: int
    image_size: int | None = None

    def build_options(self) -> dict[str, Any]:
        return {"batch": self.batch, **({"image_size": self.image_size} if self.image_size else {})}


@dataclass(frozen=True)
class Timing:
    repeats: int = 5
    warmup: int = 1


def _optimize(tools: Tools, model: nn.Module, inputs: tuple, budget: float | str, solver: str,
              mode: str = "time") -> nn.Module:
    """``remat.optimize`` without its verification step: the suite measures every plan anyway."""
    try:
        return tools.optimize(model, inputs, budget=budget, solver=solver, mode=mode, verify=False)
    except TypeError:  # an optimize without verify=
        return tools.optimize(model, inputs, budget=budget, solver=solver, mode=mode)


def _optimized(tools: Tools, model: nn.Module, inputs: tuple, graph: Any, m: Method
               ) -> tuple[nn.Module, float, float]:
    """The optimized module of method ``m``, the budget it was asked for, its predicted peak.

    The plan of the table is the solver's at its minimal budget (or at no budget, for Chen's
    own grid choice). ``remat.optimize`` takes a budget in bytes: first the plan's own peak
    (eq. 2 for stage solvers), which makes the solver choose that plan again; if the executed
    schedule does not fit it, the predicted peak of that schedule.
    """
    budget = tools.min_budget(graph, solver=m.solver, mode="time") if m.minimal else None
    own, executed = tools.predict(graph, budget, m.solver, m.mode)
    error: Exception | None = None
    for ask in dict.fromkeys((max(own, budget or 0.0), executed)):
        try:
            module = _optimize(tools, model, inputs, ask, m.solver, m.mode)
        except ValueError as e:  # the budget error of remat.optimize: try the next budget
            error = e
            continue
        # remat.optimize reports the prediction of the plan it chose, which is what runs.
        report = getattr(module, "report", None)
        chosen = report.get("predicted_peak") if isinstance(report, dict) else None
        return module, ask, float(chosen) if chosen is not None else executed
    raise error  # type: ignore[misc]


def table1_measured(networks: Iterable[str], sizes: dict[str, Size], tools: Tools,
                    methods: Iterable[Method] = MEASURED_METHODS, timing: Timing = Timing(),
                    peaks: tuple[str, ...] = ("tracker", "profiler"),
                    progress: Progress = _quiet,
                    checkpoint: Callable[[list[dict[str, Any]]], None] = lambda rows: None) -> list[dict[str, Any]]:
    """Seed 000 Table 1's methods, run for real; one row per (network, method).

    ``peaks``: the measurement methods to run (keys of PEAK_FIELD: "tracker": ``storage_peak``,
    live-storage tracking by remat.measure; "profiler": ``profiler_peak``; "cuda":
    ``cuda_peak``); each costs two steps per method.
    A network that cannot be built or captured becomes a failed row; ``checkpoint`` gets the
    rows so far after each network (the suite writes them, so a stopped run keeps them).
    """
    missing = tools.missing()
    rows: list[dict[str, Any]] = []
    for net in networks:
        size = sizes[net]
        label = {"network": net, "batch": size.batch, "image_size": size.image_size}
        if missing:
            rows.append({**label, "method": "all", "status": "unavailable",
                         "message": f"remat.{', remat.'.join(missing)} not available"})
            continue
        progress(f"table 1 (measured): {net} build and capture")
        try:
            model, inputs = tools.build(net, **size.build_options())
            graph = tools.capture(model, inputs)
        except Exception as e:  # one network failing must not lose the others' figures
            rows.append({**label, "method": "all", "status": "failed", "message": f"{type(e).__name__}: {e}"})
            checkpoint(rows)
            continue
        steps: dict[str, Step] = {}
        for m in methods:
            progress(f"table 1 (measured): {net} {m.label}")
            rows.append({**label, **_measure_method(tools, model, inputs, graph, m, steps, peaks)})
        progress(f"table 1 (measured): {net} timing {len(steps)} methods round-robin")
        _attach_times(rows, steps, net, timing)
        checkpoint(rows)
    return rows


def _measure_method(tools: Tools, model: nn.Module, inputs: tuple, graph: Any, m: Method,
                    steps: dict[str, Step], peaks: tuple[str, ...]) -> dict[str, Any]:
    row: dict[str, Any] = {"method": m.label, "solver": m.solver, "mode": m.mode}
    if m.max_nodes is not None and len(graph) > m.max_nodes:
        return {**row, "status": "skipped",
                "message": f"{len(graph)} nodes captured, over this method's {m.max_nodes}"}
    try:
        if m.solver == "none":
            module, budget, predicted = model, None, tools.predict(graph, None, "none", "time")[1]
        else:
            module, budget, predicted = _optimized(tools, model, inputs, graph, m)
        step = train_step(module, inputs, tools.loss)
        row.update(budget=budget, predicted_peak=predicted, status="ok")
        for kind in peaks:
            if kind != "profiler" and tools.measure is None:
                continue  # only the profiler method is built in without remat.measure
            row[PEAK_FIELD[kind]] = measured_peak(tools.measure, module, inputs, tools.loss, kind)
    except Exception as e:  # one method failing must not lose the others' figures
        return {**row, "status": "failed", "message": f"{type(e).__name__}: {e}"}
    steps[m.label] = step
    return row


def _attach_times(rows: list[dict[str, Any]], steps: dict[str, Step], net: str, timing: Timing) -> None:
    """Ratios to vanilla and reductions for the rows of ``net`` (reference: method 'vanilla')."""
    mine = [r for r in rows if r.get("network") == net and r.get("status") == "ok"]
    ref = next((r for r in mine if r["solver"] == "none"), None)
    if ref is None or "vanilla" not in steps:
        return
    times = interleave(steps, repeats=timing.repeats, warmup=timing.warmup)
    ratios = time_ratios(times, "vanilla")
    for r in mine:
        key = r["method"]
        r["step_seconds_median"] = sorted(times[key])[len(times[key]) // 2]
        r["time_ratio"] = ratios[key]
        for kind in (*PEAK_FIELD.values(), "predicted_peak"):
            if r.get(kind) is not None and ref.get(kind):
                r[f"reduction_{kind.removesuffix('_peak')}"] = 1.0 - r[kind] / ref[kind]


def tradeoff_measured(net: str, size: Size, tools: Tools, solver_names: Iterable[str],
                      fractions: Iterable[float], compile_budgets: Iterable[float],
                      timing: Timing = Timing(), progress: Progress = _quiet,
                      allocator: str = "profiler", match: str | None = "auto") -> list[dict[str, Any]]:
    """Memory vs time of remat's solvers and the peers, all measured in one run at the allocator
    level (``allocator``: "profiler" on CPU, "cuda" on a GPU).

    ``match``: a solver also planned at each peer's measured memory ratio (the budget as that
    fraction of vanilla), so that every peer meets a remat plan aimed at its own peak rather than
    the nearest point of the sweep; those rows carry ``matched`` = the peer's name.
    """
    model, inputs = tools.build(net, **size.build_options())
    label = {"network": net, "batch": size.batch, "image_size": size.image_size}
    rows: list[dict[str, Any]] = [{**label, "method": "vanilla", "kind": "vanilla", "status": "ok"}]
    modules: dict[str, nn.Module] = {"vanilla": model}
    peaks: dict[str, float] = {}

    def measure_new() -> None:
        new = [name for name in modules if name not in peaks]
        progress(f"trade-off (measured): {net} {allocator} peaks of {len(new)} steps")
        peaks.update({name: measured_peak(tools.measure, modules[name], inputs, tools.loss, allocator)
                      for name in new})

    def plan(name: str, solver: str, fraction: float, **extra: Any) -> None:
        progress(f"trade-off (measured): {net} {name}")
        budget = f"{100 * fraction:.1f}%"
        rows.append(_candidate(modules, {**label, "method": name, "kind": "remat", "solver": solver,
                                         "fraction": fraction, **extra},
                               lambda: (_optimize(tools, model, inputs, budget, solver), {})))

    # The compiled peers first: nothing else has run a dispatch mode in this network's run yet.
    for b in compile_budgets:
        name = f"torch.compile budget {b:g}"
        progress(f"trade-off (measured): {net} {name}")
        rows.append(_candidate(modules, {**label, "method": name, "kind": "peer", "budget": b},
                               lambda b=b: _compiled(model, inputs, tools, b)))
    progress(f"trade-off (measured): {net} per-block checkpoint")
    rows.append(_candidate(modules, {**label, "method": "checkpoint per block", "kind": "peer"},
                           lambda: _checkpointed(model)))
    measure_new()
    if tools.missing():
        rows.append({**label, "method": "remat solvers", "kind": "remat", "status": "unavailable",
                     "message": f"remat.{', remat.'.join(tools.missing())} not available"})
    else:
        for solver in solver_names:
            for f in fractions:
                plan(f"{solver} {f:.0%}", solver, f)
        for peer in [r for r in rows if r["kind"] == "peer" and r["status"] == "ok"] if match else ():
            plan(f"{match} at {peer['method']}'s peak", match, peaks[peer["method"]] / peaks["vanilla"],
                 matched=peer["method"])
    measure_new()
    progress(f"trade-off (measured): {net} round-robin timing of {len(modules)} steps")
    steps = {name: train_step(m, inputs, tools.loss) for name, m in modules.items()}
    ratios = time_ratios(interleave(steps, repeats=timing.repeats, warmup=timing.warmup), "vanilla")
    for r in rows:
        if r.get("status") == "ok":
            r.update({PEAK_FIELD[allocator]: peaks[r["method"]]}, memory_ratio=peaks[r["method"]] / peaks["vanilla"],
                     time_ratio=ratios[r["method"]])
    if tools.measure is not None:
        # Live-storage tracking (op level, remat's planning scale) where it applies: not under
        # torch.compile, which runs eager inside a dispatch mode. Taken after the timing, last.
        progress(f"trade-off (measured): {net} storage tracking of the eager steps")
        for r in rows:
            if r.get("status") == "ok" and not r["method"].startswith("torch.compile"):
                r["storage_peak"] = measured_peak(tools.measure, modules[r["method"]], inputs, tools.loss, "tracker")
    return rows


def _compiled(model: nn.Module, inputs: tuple, tools: Tools, budget: float) -> tuple[nn.Module, dict[str, Any]]:
    import time

    import torch._dynamo

    module = peers.Compiled(copy.deepcopy(model), budget)
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    started = time.perf_counter()
    train_step(module, inputs, tools.loss)  # compiles
    return module, {"compile_seconds": time.perf_counter() - started,
                    "graphs_compiled": torch._dynamo.utils.counters["stats"]["unique_graphs"] - before}


def _checkpointed(model: nn.Module) -> tuple[nn.Module, dict[str, Any]]:
    wrapped, blocks = peers.checkpoint_blocks(model)
    return wrapped, {"blocks": blocks}


def _candidate(modules: dict[str, nn.Module], row: dict[str, Any],
               make: Callable[[], tuple[nn.Module, dict[str, Any]]]) -> dict[str, Any]:
    try:
        module, info = make()
    except Exception as e:  # a peer or solver failing is a row, the others still run
        return {**row, "status": "failed", "message": f"{type(e).__name__}: {e}"}
    modules[row["method"]] = module
    return {**row, **info, "status": "ok"}
