"""The planner as an AOTAutograd partition function: joint graph in, planned forward and
backward graphs out. ``remat.optimize`` (via ``aot_module_simplified``) and ``remat.backend``
(via torch.compile, eager or inductor) both partition with it, so one plan, one code.

For each joint graph it is called with: build the planning Graph (``jointgraph.build``), turn
the budget into bytes (a percentage is of this graph's vanilla peak: measured when the caller
gives it, else simulated), plan within it (``optimize.plan_within``: the cheapest plan whose
executed schedule fits), and split the joint graph by that schedule (``split.split``). With
several graphs (torch.compile graph breaks), a byte budget is shared: each graph is planned
within what the graphs before it left, since their kept values are still held while it runs.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch.fx as fx

from ..plan import Plan
from ..simulate import Simulation
from .jointgraph import JointGraph, build, total_cost
from .split import Split, split


class BudgetSplitError(ValueError):
    """A byte budget is used up by the graphs planned before this one (torch.compile graph breaks)."""


@dataclass
class Planned:
    """What one partition decided, for the report."""

    joint: JointGraph
    plan: Plan
    steps: list
    prediction: Simulation
    vanilla: float                  # simulated vanilla peak of this graph
    budget: float                   # bytes this graph was planned within
    split: Split
    seconds: float                  # planning + splitting
    kept_bytes: float
    notes: list[str] = field(default_factory=list)
    tried: list[dict] = field(default_factory=list)   # each candidate's plan at each planning budget

    @property
    def recompute_fraction(self) -> float:
        """Recomputed work as a fraction of one forward, in the graph's own costs."""
        total = total_cost(self.joint.graph)
        return self.prediction.recompute_cost / total if total else 0.0

    def summary(self) -> dict[str, Any]:
        return {"graph": self.joint.graph.name, "nodes": len(self.joint.graph), "solver": self.plan.solver,
                "chosen": self.plan.stats.get("chosen", self.plan.solver),
                "budget": self.budget, "vanilla_predicted_peak": self.vanilla,
                "predicted_peak": self.prediction.peak, "recompute_cost": self.prediction.recompute_cost,
                "recompute_fraction": self.recompute_fraction, "kept_bytes": self.kept_bytes,
                "saved_values": len(self.split.saved), "recomputed_ops": self.split.recomputed,
                "unplanned_ops": self.split.unplanned, "planning_seconds": self.seconds, "notes": self.notes}


class Planner:
    """AOTAutograd ``partition_fn`` that plans each joint graph within ``budget``.

    ``budget``: bytes, a size string ("2GiB") or a percentage ("40%"; a float in (0, 1) is a
    fraction). ``vanilla``: the measured vanilla peak percentages are of (one graph), else each
    graph's simulated vanilla peak. ``planning_budget``: bytes to plan for instead of the budget
    (``optimize`` tightens it after a measured step came out over). ``strict=False`` (the
    backend): a graph whose floor is above a percentage budget (a loss computed in a graph of its
    own after a graph break) is planned at its floor, with a warning, instead of failing.
    """

    def __init__(self, budget: Any, solver: str = "auto", mode: str = "time", cost: str = "flops",
                 vanilla: float | None = None, device: Any = None, name: str = "model",
                 planning_budget: float | None = None, strict: bool = True) -> None:
        self.budget = budget
        self.solver = solver
        self.mode = mode
        self.cost = cost
        self.vanilla = vanilla
        self.device = device
        self.name = name
        self.planning_budget = planning_budget
        self.strict = strict  # False: a graph a percentage cannot be met on is planned at its floor
        self.planned: list[Planned] = []
        self.spent = 0.0  # bytes kept by graphs planned before (shared byte budgets)

    def __call__(self, gm: fx.GraphModule, joint_inputs: Any, *, num_fwd_outputs: int,
                 **_: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        from ..optimize import BudgetError, parse_budget, plan_within, smallest_choice, vanilla_peak
        from ..runtime import _executed

        started = time.perf_counter()
        jg = build(gm, num_fwd_outputs, cost=self.cost, name=self.name if not self.planned else
                   f"{self.name}#{len(self.planned)}", device=self.device)
        graph = jg.graph
        graph.pinned = jg.random  # dropout draws are kept, never redrawn
        vanilla = vanilla_peak(graph)
        notes: list[str] = []
        relative = _is_relative(self.budget)
        base = self.vanilla if (self.vanilla is not None and not self.planned) else vanilla
        target = parse_budget(self.budget, base)
        if self.planning_budget is not None and not self.planned:
            target = min(target, self.planning_budget)
        if not relative and self.spent:
            left = target - self.spent
            notes.append(f"budget shared with {len(self.planned)} earlier graph(s) holding "
                         f"{self.spent:.0f} bytes: this graph gets {max(left, 0):.0f}")
            if left <= 0:
                raise BudgetSplitError(
                    f"remat: the budget of {target:.0f} bytes is used up by the {len(self.planned)} graph(s) "
                    f"torch.compile made before this one (graph breaks; their kept values take "
                    f"{self.spent:.0f} bytes while this graph runs). Remove the graph breaks "
                    f"(torch._dynamo.explain(model)(inputs) lists them), or give a percentage budget, "
                    f"which applies to each graph's own peak")
            target = left
        whole = relative and parse_budget(self.budget, 1.0) >= 1.0 and self.planning_budget is None  # "100%"
        if target >= vanilla or whole:  # nothing to recompute: the plain step
            choice = plan_within(graph, target, "none", self.mode, base=base)
            notes.append(f"the budget covers the vanilla peak: nothing is recomputed ({self.solver} not run)")
        else:
            try:
                choice = plan_within(graph, target, self.solver, self.mode, base=base)
            except BudgetError:
                if self.strict or not relative:
                    raise
                choice = smallest_choice(graph, self.solver, self.mode)
                if choice is None:
                    raise
                notes.append(f"{self.budget} of this graph's peak is below what any plan reaches: planned at "
                             f"its floor, {100 * choice.peak / max(vanilla, 1):.1f}%")
                warnings.warn(f"remat: graph {graph.name}: {notes[-1]}", stacklevel=2)
        steps, prediction = _executed(graph, choice.plan)
        sp = split(jg, steps)
        kept_bytes = sum(graph[v].mem for v in _kept(graph, steps))
        self.spent += kept_bytes
        self.planned.append(Planned(joint=jg, plan=choice.plan, steps=steps, prediction=prediction,
                                    vanilla=vanilla, budget=target, split=sp,
                                    seconds=time.perf_counter() - started, kept_bytes=kept_bytes, notes=notes,
                                    tried=choice.tried))
        return sp.forward, sp.backward


def _kept(graph: Any, steps: list) -> set[str]:
    from ..runtime import Instances

    inst = Instances.of(graph, steps)
    return {v for v in graph.order if inst.reads[v][0] > 0}


def _is_relative(budget: Any) -> bool:
    if isinstance(budget, str):
        return budget.strip().endswith("%")
    return isinstance(budget, float) and 0 < budget < 1

