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

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Plan":
        """The Plan ``to_json`` wrote (schedule steps back to tuples, "inf" back to infinity)."""
        def num(x: Any) -> float | None:
            return None if x is None else float(x)

        problem = data.get("problem", "training")
        schedule = [tuple(s) if isinstance(s, list) else s for s in data.get("schedule", [])]
        return cls(solver=data["solver"], budget=num(data.get("budget")), feasible=bool(data["feasible"]),
                   schedule=schedule, kept=list(data.get("kept", [])),
                   stages=None if data.get("stages") is None else [list(s) for s in data["stages"]],
                   peak=num(data.get("peak", "inf")), recompute_cost=num(data.get("recompute_cost", "inf")),
                   solve_seconds=float(data.get("solve_seconds", 0.0)), mode=data.get("mode"), problem=problem,
                   status=data.get("status", "ok"), message=data.get("message", ""),
                   stats=dict(data.get("stats") or {}))

    def save(self, path: Any) -> None:
        """Write the plan as JSON (``Plan.load`` reads it; ``remat.optimize(..., plan=path)`` runs it)."""
        import json
        from pathlib import Path

        Path(path).write_text(json.dumps(self.to_json(), indent=1, default=_jsonable))

    @classmethod
    def load(cls, path: Any) -> "Plan":
        """The plan ``save`` wrote to ``path``."""
        import json
        from pathlib import Path

        return cls.from_json(json.loads(Path(path).read_text()))


def _jsonable(x: Any) -> Any:
    """What json cannot write by itself in a plan's stats: sets, tuples of tuples, numpy numbers."""
    if isinstance(x, (set, frozenset)):
        return sorted(x, key=str)
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def infeasible(solver: str, budget: float | None, message: str, **fields: Any) -> Plan:
    """The Plan returned when no strategy fits: not an exception (DESIGN.md)."""
    return Plan(solver=solver, budget=budget, feasible=False, status="infeasible", message=message, **fields)
