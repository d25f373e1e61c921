"""NoRemat: keep every forward value, recompute nothing (the vanilla training step).

Its Plan is the single-stage-per-node canonical strategy; ``peak`` is the simulated peak of
the vanilla schedule, which is what PyTorch does with liveness. On the schedule problem of
seed 004 §2 it is the paper's NoRemat: each node f needs, once, in topological order.
"""

from __future__ import annotations

import time

from .. import joint
from ..graph import Graph
from ..plan import Plan
from . import register
from .common import kept_plan


@register("none", problems=("training", "schedule"))
def solve(graph: Graph, budget: float | None = None, *, problem: str = "training",
          final: str | None = None, **options) -> Plan:
    """Keep everything: the vanilla step (NoRemat)."""
    if problem == "schedule":
        started = time.perf_counter()
        final = joint.resolve_final(graph, final)
        seq = joint.topological(graph, joint.ancestors(graph, [final]))
        return joint.sequence_plan(graph, seq, final, "none", budget, started)
    return kept_plan(graph, list(graph.order), "none", budget, time.perf_counter())
