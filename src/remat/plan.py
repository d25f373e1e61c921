"""Plan: what a solver decided, in one shape for every solver.

Two problems share it (``problem``):

- ``"training"``: one forward + backward step. ``schedule`` is a list of steps
  ``("fwd", v)`` (compute v's forward value; a repeat is a recomputation), ``("bwd", v)``
  (back-propagate through v) and ``("free", v)`` (drop v's forward value). Stage-based solvers
  also fill ``stages`` (V_1..V_k of seed 000 §3); ``peak`` is then eq. (2).
- ``"schedule"``: seed 004 §2, computing one final node. ``schedule`` is the node sequence σ
  (nodes may repeat) and ``peak`` is M(σ).

``peak`` is each solver's own model; ``remat.simulate`` is the common yardstick.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Step = tuple[str, str]


@dataclass
class Plan:
    solver: str
    budget: float | None
    feasible: bool
    schedule: list[Any] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    stages: list[list[str]] | None = None
    peak: float = float("inf")
    recompute_cost: float = float("inf")
    solve_seconds: float = 0.0
    mode: str | None = None
    problem: str = "training"
    status: str = "ok"
    message: str = ""
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def num_stages(self) -> int | None:
        return None if self.stages is None else len(self.stages)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form of every field (the CLI's ``--json``)."""
        def num(x: float | None) -> Any:
            if x is None:
                return None
            if x == float("inf"):
                return "inf"
            return int(x) if float(x).is_integer() else x

        return {
            "solver": self.solver, "mode": self.mode, "problem": self.problem,
            "budget": num(self.budget), "feasible": self.feasible, "status": self.status,
            "message": self.message, "peak": num(self.peak),
            "recompute_cost": num(self.recompute_cost), "num_stages": self.num_stages,
            "stages": self.stages, "kept": self.kept,
            "schedule": [list(s) if isinstance(s, tuple) else s for s in self.schedule],
            "solve_seconds": self.solve_seconds, "stats": self.stats,
        }


def infeasible(solver: str, budget: float | None, message: str, **fields: Any) -> Plan:
    """The Plan returned when no strategy fits: not an exception (DESIGN.md)."""
    return Plan(solver=solver, budget=budget, feasible=False, status="infeasible", message=message, **fields)
