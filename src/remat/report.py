"""``module.report``: what ``remat.optimize`` decided and measured, as a small dataclass.

``print(module.report)`` gives the budget, the vanilla, predicted and measured peaks, the
predicted time ratio, the solver, and where the memory goes at the planned peak (bytes live by
module, and gradient buffers). ``dataclasses.asdict(report)`` and ``report.to_json()`` give the
full record, every candidate tried included. ``report["measured_peak"]`` and ``report.get(...)``
still read it as the dict it used to be (the planner's other keys are in ``extra``).

The time ratio is predicted from the plan's recompute cost: one vanilla step costs a forward
and a backward of twice the forward's work (the usual 3x-forward flop count of training), so
``time_ratio = 1 + recompute_cost / (3 * forward_cost)``. With ``cost="flops"`` it counts
arithmetic, not the memory traffic of cheap pointwise ops; ``remat run`` measures it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

SHOWN = 6  # modules listed under "where the memory goes"


def time_ratio(recompute_cost: float, forward_cost: float) -> float:
    """Predicted step time with the plan over the vanilla step's: 1 + R / (3 F)."""
    return 1.0 + recompute_cost / (3.0 * forward_cost) if forward_cost > 0 else 1.0


@dataclass
class Report:
    """The record of one ``remat.optimize`` call (bytes for memory, the graph's cost unit for costs)."""

    model: str
    executor: str                       # "compiled", "interpret", or "eager" (nothing to recompute: the model as is)
    solver: str                         # the solver whose plan runs
    mode: str
    budget: float                       # bytes of activation memory the step was planned within
    vanilla_predicted_peak: float       # simulated peak of the plain step
    predicted_peak: float               # predicted peak of the planned step (the generated code's own)
    vanilla_measured_peak: float | None = None   # measured on the plain model (verify=True)
    measured_peak: float | None = None  # measured on the planned step (verify=True)
    method: str | None = None           # how it was measured: "profiler" (CPU, allocator level; "tracker" for
                                        # the interpreter) or "cuda"
    time_ratio: float = 1.0             # predicted, see the module docstring
    recompute_cost: float = 0.0
    forward_cost: float = 0.0
    recompute_fraction: float = 0.0     # recompute_cost / forward_cost
    cost: str | None = None             # the cost model costs are in (cost="auto" resolved: "profile" on CUDA, ...)
    kept: int = 0                       # values the forward pass holds for the backward
    kept_bytes: float | None = None
    recomputed_ops: int | None = None
    memory: dict[str, float] = field(default_factory=dict)  # live at the planned peak: module -> bytes
    peak_step: int | None = None
    steps: int | None = None
    graph: str | None = None
    nodes: int | None = None
    verify_rounds: int | None = None
    planning_seconds: float | None = None
    compile_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    tried: list[dict] = field(default_factory=list)   # every candidate plan, at every planning budget
    extra: dict[str, Any] = field(default_factory=dict)

    # ---- the old dict interface ---------------------------------------------------------------
    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self) if f.name != "extra"] + list(self.extra)

    def __getitem__(self, key: str) -> Any:
        if key != "extra" and key in _FIELDS:
            return getattr(self, key)
        if key in self.extra:
            return self.extra[key]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def items(self) -> Iterator[tuple[str, Any]]:
        return ((k, self[k]) for k in self.keys())

    def to_json(self) -> dict[str, Any]:
        """The full record (``dataclasses.asdict``)."""
        return dataclasses.asdict(self)

    # ---- text -----------------------------------------------------------------------------------
    @property
    def vanilla_peak(self) -> float:
        """The base of percentages: measured when there is a measurement, else simulated."""
        return self.vanilla_measured_peak if self.vanilla_measured_peak is not None else self.vanilla_predicted_peak

    def _vanilla_text(self, both: Any) -> str:
        """The vanilla row: measured eager step and its prediction, or, where remat's own code with
        nothing recomputed needs less than eager's step (a softmax gradient written over the
        incoming one), that, said as such."""
        from .optimize import fmt_bytes

        measured, predicted = self.vanilla_measured_peak, self.vanilla_predicted_peak
        if measured is None or predicted >= 0.99 * measured:
            return both(measured, predicted)
        return (f"{fmt_bytes(measured)} measured ({self.method}); remat's code with nothing recomputed: "
                f"{fmt_bytes(predicted)} predicted")

    def __str__(self) -> str:
        from .optimize import fmt_bytes

        def pct(x: float) -> str:
            return f"{100 * x / self.vanilla_peak:.1f}% of vanilla" if self.vanilla_peak else ""

        def both(measured: float | None, predicted: float) -> str:
            m = f"{fmt_bytes(measured)} measured ({self.method}), " if measured is not None else ""
            return f"{m}{fmt_bytes(predicted)} predicted"

        peak = self.measured_peak if self.measured_peak is not None else self.predicted_peak
        verdict = "within budget" if peak <= self.budget * 1.01 else "OVER BUDGET"
        kept = f"{self.kept} values" + (f", {fmt_bytes(self.kept_bytes)}" if self.kept_bytes is not None else "")
        rows = [
            ("budget", f"{fmt_bytes(self.budget)} ({pct(self.budget)})"),
            ("vanilla peak", self._vanilla_text(both)),
            ("planned peak", f"{both(self.measured_peak, self.predicted_peak)}: {verdict}, {pct(peak)}"),
            ("time ratio", f"{self.time_ratio:.2f}x predicted (recomputes {100 * self.recompute_fraction:.1f}% "
                           f"of one forward" + (f", {self.cost} costs)" if self.cost else ")")),
            ("kept", kept + (f"; {self.recomputed_ops} ops recomputed" if self.recomputed_ops is not None else "")),
        ]
        width = max(len(k) for k, _ in rows)
        out = [f"remat plan for {self.model}: solver {self.solver}, {self.executor} executor, mode {self.mode}"]
        out += [f"  {k.ljust(width)}  {v}" for k, v in rows]
        if self.memory:
            where = f" (step {self.peak_step} of {self.steps})" if self.peak_step is not None else ""
            out.append(f"  where the memory goes at the planned peak{where}:")
            total = sum(self.memory.values()) or 1.0
            mods = [(k, v) for k, v in self.memory.items() if k != "gradients"]
            shown = mods[:SHOWN]
            rest = mods[SHOWN:]
            lines = [*shown]
            if rest:
                lines.append((f"{len(rest)} other modules", sum(v for _, v in rest)))
            if "gradients" in self.memory:
                lines.append(("gradient buffers", self.memory["gradients"]))
            w = max(len(k) for k, _ in lines)
            out += [f"    {k.ljust(w)}  {fmt_bytes(v):>11}  {100 * v / total:5.1f}%" for k, v in lines]
        timing = []
        if self.planning_seconds is not None:
            timing.append(f"planned in {self.planning_seconds:.1f} s")
        if self.compile_seconds is not None:
            timing.append(f"compiled in {self.compile_seconds:.1f} s")
        if self.verify_rounds is not None:
            timing.append(f"verified with {self.verify_rounds + 1} measured step(s)")
        if timing:
            out.append("  " + ", ".join(timing))
        out += [f"  note: {n}" for n in self.notes]
        return "\n".join(out)


_FIELDS = {f.name for f in dataclasses.fields(Report)}


def build(record: dict[str, Any], graph: Any, steps: list, model: str) -> Report:
    """A Report from optimize's record (its keys become fields, the rest ``extra``), with the
    time ratio and where the memory goes computed on the planning graph and executed schedule."""
    from .explain import _recomputed, at_peak, forward_cost, held_across

    rec = dict(record)
    fwd = forward_cost(graph)
    recompute = float(rec.get("recompute_cost", 0.0) or 0.0)
    live, peak_step, n = at_peak(graph, steps)
    rec.setdefault("kept_bytes", math.fsum(graph[v].mem for v in held_across(graph, steps)))
    rec.setdefault("recomputed_ops", len(_recomputed(steps)))
    rec.setdefault("graph", graph.name)
    rec.setdefault("nodes", len(graph))
    values = {k: rec.pop(k) for k in list(rec) if k in _FIELDS and k != "extra"}
    values.setdefault("recompute_fraction", recompute / fwd if fwd else 0.0)
    return Report(model=model, forward_cost=fwd, time_ratio=time_ratio(recompute, fwd), memory=live,
                  peak_step=peak_step, steps=n, extra=rec,
                  **{k: v for k, v in values.items() if k not in ("model", "forward_cost", "time_ratio", "memory",
                                                                 "peak_step", "steps")})
