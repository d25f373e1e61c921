"""The backend's plans kept on disk: a restarted run compiles its graphs without planning them again.

``remat.backend(budget, plan_cache="plans/")`` stores each joint graph's plan, or its refusal, as one
JSON file in ``plans/`` (``plancache.PlanCache``, written atomically), named by a hash of what the
plan depends on (``key``): the planning graph (``partitioner.fingerprint``: every node's name, op,
bytes and inputs), the terms the planner resolved for it (target bytes, the base of a percentage,
what graphs around a graph break hold and need, the tangents assumed unused, the parameters whose
gradients the backward adds in), the solver, mode, cost model, device, whether ``.grad`` is held,
whether inductor's code runs it and with its layout optimization, and the torch version.

A later compile of the same graph loads the entry: the plan is split again and its code walked
(about a second; the fused search it replaces takes a minute on a ResNet-152), and used where that
walk peaks no higher than it did when stored; otherwise (remat's code changed) it is planned again
and the file replaced. A stored refusal is raised again as made, so the attempt inductor retries
without its layout optimization is not searched again either.

Under inductor the cache serves inductor's own caches too: the partitioner's key in inductor's
config names the plan cache instead of the planner object, so a restarted run's graphs, split as
before, are found among inductor's compiled graphs (``backend._partitioned_each_time``; remat's
meta on a graph, pickled into that key, reduces to stable text: ``fusionguard.Guard``,
``tangents.Assumed``).
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from ..errors import InfeasibleError
from ..plan import Plan

FORMAT = 1  # of an entry; part of every key


def key(made_for: tuple, **terms: Any) -> str:
    """The file name (no ``.json``) for a joint graph planned under ``made_for`` (the planner's
    in-process key, ``Planner._again``) and ``terms`` (the settings it does not hold)."""
    parts = [f"format {FORMAT}", f"torch {torch.__version__}", repr(_stable(made_for)),
             *(f"{k} {_stable(v)!r}" for k, v in sorted(terms.items()))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _stable(x: Any) -> Any:
    """``x`` with its sets sorted: a set of strings is repr'd in an order that changes per process."""
    if isinstance(x, (set, frozenset)):
        return tuple(sorted(map(_stable, x), key=repr))
    if isinstance(x, (tuple, list)):
        return type(x)(map(_stable, x))
    return x


def plan_entry(plan: Plan, notes: list[str], peak: float, seconds: float, partition: bool) -> dict:
    """A plan made: ``peak`` is its code's predicted peak, ``partition``: inductor's own (made again on load)."""
    return {"plan": plan.to_json(), "notes": list(notes), "peak": float(peak), "seconds": float(seconds),
            "partition": partition}


def refusal_entry(error: InfeasibleError) -> dict:
    return {"refused": str(error), "needed": getattr(error, "needed", None), "kind": type(error).__name__}


def refusal(entry: dict) -> InfeasibleError | None:
    """The stored refusal, as the error class it was raised as (None: the entry is a plan)."""
    if "refused" not in entry:
        return None
    from .refusals import BudgetSplitError

    kind = BudgetSplitError if entry.get("kind") == BudgetSplitError.__name__ else InfeasibleError
    return kind(entry["refused"], needed=entry.get("needed"))
