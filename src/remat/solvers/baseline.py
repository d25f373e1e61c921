"""NoRemat: keep every forward value, recompute nothing (the vanilla training step).

Its Plan is the single-stage-per-node canonical strategy; ``peak`` is the simulated peak of
the vanilla schedule, which is what PyTorch does with liveness.
"""

from __future__ import annotations

import time

from ..graph import Graph
from ..plan import Plan
from . import register
from .common import kept_plan


@register("none")
def solve(graph: Graph, budget: float | None = None, **options) -> Plan:
    """Keep everything: the vanilla step (NoRemat)."""
    return kept_plan(graph, list(graph.order), "none", budget, time.perf_counter())
