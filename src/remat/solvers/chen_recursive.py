"""Chen et al. 2016 (seed 002) §4.4: recursion, O(log n) memory for O(n log n) extra forward work.

§4.4 views a segment as one bulk operator whose backward runs its own sub-graph, so the segment
plan applies again inside it: with k values stored per level, g(n) = k + g(n / (k + 1)), i.e.
g(n) = k log_{k+1}(n), and k = 1 gives log2 n. In Alg. 2's terms a node's mirror count is the
number of levels that drop it, so mirror counts above 1 appear.

The recursion (``recursive_schedule``), on the graph's own topological order (the forward's
execution order on captured graphs, so that the backward runs in autograd's order and the runtime
executes the schedule as planned), cutting only after a value that is the only one of everything
before it read later (``chen_drop.single_cuts``; on a chain every node, on a ResNet the block
outputs):

    backprop(segment):
        if it is one node or has no split candidate: forward it, then back-propagate it in reverse
        cut it into q parts at candidates nearest to equal shares of its memory
        forward all parts but the last, keeping only each part's last node (the k = q - 1 stored
        values); drop everything else
        for each part, last first: backprop(part)

The top-level call is the training step. A part's forward starts from the stored value before
it, the only earlier value it reads. The steps are built by ``chen_drop.Mirror``: a dropped value
is recomputed before its next read, and the simulator frees each copy after its last read, so a
value can be recomputed once per level. A graph without cuts (skips everywhere) is one segment:
the vanilla step.

Where a segment may be cut (``cuts``, see ``chen_drop.cut_flags``): ``"single"`` after a value
that is the only one of everything before it read later (on a chain every node, on a ResNet the
block outputs: exactly one stored value per cut); ``"minima"`` where the memory read across the
cut is a local minimum (a stacked LSTM has no single-value cut: every cut keeps each layer's
states, and the outputs waiting for the final stack); ``"search"`` (default) both. With a cut
keeping several values, every value read across it is stored.

Parameters (``q`` at each level):

- ``k``: q = k + 1 at every level, recursion down to single nodes: §4.4's g(n) = k log_{k+1} n.
- ``levels``: L levels, q = ceil(size^(1/levels_left)) for a segment of ``size`` nodes, so
  ``levels=1`` is the vanilla step, ``levels=2`` sqrt(n) segments (§4.3), and
  ``levels=ceil(log2 n)`` the binary recursion. Extra forward work is about (L - 1) forwards.
- neither: ``k=1`` without a budget (the paper's g(n) = log2 n); with a budget, every number of
  levels (1 .. ceil(log2 n)).

Every candidate (cut rule x the configurations above) is simulated; without a budget the least
peak is returned, with one the least recompute cost among those that fit, else the least peak
with ``feasible=False``. Candidates do not depend on the budget, so feasibility is monotone.

``plan.peak`` is the simulated peak of the schedule; ``mode`` is ignored; ``stats`` carry ``k``
or ``levels``, the cut rule, the recursion depth and every candidate tried.

Tested in tests/test_seed_rest.py: a chain of 4 by hand, validity on random DAGs, and on chains
of 100 and 1000 nodes memory growing by about log2(10) units and recompute by about log2(10)
forwards. bench/bench_chen_recursive.py fits both on chains of 10^2..10^5 nodes.
"""

from __future__ import annotations

import bisect
import math
import sys
import time

from ..errors import SolverError
from ..graph import Graph
from ..plan import Plan, Step
from ..simulate import simulate_training
from . import register
from .chen_drop import Mirror, cut_flags, cut_rules, last_reads
from .common import within


class _Recursion:
    def __init__(self, graph: Graph, k: int | None, levels: int | None, cuts: str = "single"):
        self.order = list(graph.order)
        self.can_split = cut_flags(graph, cuts)  # may cut right after position i
        self.last = last_reads(graph)
        acc, self.cum = 0.0, [0.0]
        for v in self.order:
            acc += graph[v].mem or 1e-12  # zero-size nodes still count, barely
            self.cum.append(acc)
        self.k, self.levels = k, levels
        self.m = Mirror(graph)
        self.depth = 0

    def parts(self, a: int, b: int, levels_left: int) -> list[int]:
        """Cut points e (part ends) strictly inside (a, b), at candidates near equal memory shares."""
        size = b - a
        if self.k is not None:
            q = self.k + 1
        else:
            if levels_left <= 1:
                return []
            q = math.ceil(size ** (1 / levels_left) - 1e-9)
        q = min(q, size)
        ends = [i + 1 for i in range(a, b - 1) if self.can_split[i]]
        if q < 2 or not ends:
            return []
        lo, total = self.cum[a], self.cum[b] - self.cum[a]
        chosen: list[int] = []
        j = 0
        for part in range(1, q):
            target = lo + total * part / q
            while j + 1 < len(ends) and abs(self.cum[ends[j + 1]] - target) <= abs(self.cum[ends[j]] - target):
                j += 1
            if not chosen or ends[j] > chosen[-1]:
                chosen.append(ends[j])
        return chosen

    def backprop(self, a: int, b: int, levels_left: int, depth: int = 1) -> None:
        self.depth = max(self.depth, depth)
        order, m = self.order, self.m
        cuts = self.parts(a, b, levels_left)
        if not cuts:
            m.forward(order[a:b])
            for v in reversed(order[a:b]):
                m.backward(v)
            return
        m.forward(order[a:cuts[-1]])
        # stored: each value read across the next cut after it (a part's last node, and on an
        # RNN the states a cut keeps); the rest of the forward is dropped
        m.drop(order[i] for i in range(a, cuts[-1])
               if cuts[bisect.bisect_right(cuts, i)] > self.last[i])
        bounds = [a, *cuts, b]
        for s, e in reversed(list(zip(bounds, bounds[1:]))):
            self.backprop(s, e, levels_left - 1, depth + 1)


def recursive_schedule(graph: Graph, k: int | None = 1, levels: int | None = None,
                       cuts: str = "single") -> tuple[list[Step], int]:
    """§4.4's schedule with ``k`` stored values per level or ``levels`` levels; and its depth."""
    r = _Recursion(graph, k, levels, cuts)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(graph) + 100))  # depth is log n, unless splits are scarce
    try:
        r.backprop(0, len(r.order), levels if levels is not None else 0)
    finally:
        sys.setrecursionlimit(limit)
    return r.m.steps, r.depth


def _check(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise SolverError(f"{name} must be an integer >= 1 or None, got {value!r}")


def max_levels(graph: Graph) -> int:
    """Levels of the binary recursion: beyond this, more levels change nothing."""
    return max(1, math.ceil(math.log2(max(len(graph), 2))))


@register("chen-recursive")
def solve(graph: Graph, budget: float | None = None, *, k: int | None = None, levels: int | None = None,
          cuts: str = "search", **options) -> Plan:
    """Chen et al. §4.4 recursion: g(n) = k + g(n/(k+1)), log2 n memory at k = 1."""
    _check("k", k)
    _check("levels", levels)
    if k is not None and levels is not None:
        raise SolverError("give k (stored values per level) or levels (recursion depth), not both")
    started = time.perf_counter()
    if k is not None or levels is not None or budget is None:
        configs = [(k if k is not None or levels is not None else 1, levels)]
    else:
        configs = [(None, L) for L in range(1, max_levels(graph) + 1)]
    tried, plans = [], []
    for rule in cut_rules(graph, cuts):
        for ck, cl in configs:
            steps, depth = recursive_schedule(graph, ck, cl, rule)
            sim = simulate_training(graph, steps)
            tried.append({"k": ck, "levels": cl, "cuts": rule, "peak": sim.peak, "recompute_cost": sim.recompute_cost})
            plans.append((steps, sim, ck, cl, rule, depth))
    fitting = [p for p in plans if within(p[1].peak, budget)] if budget is not None else []
    if fitting:
        best = min(fitting, key=lambda p: (p[1].recompute_cost, p[1].peak))
    else:
        best = min(plans, key=lambda p: (p[1].peak, p[1].recompute_cost))
    steps, sim, ck, cl, rule, depth = best
    counts: dict[str, int] = {}
    for kind, v in steps:
        if kind == "fwd":
            counts[v] = counts.get(v, 0) + 1
    return Plan(solver="chen-recursive", budget=budget, feasible=within(sim.peak, budget), schedule=steps,
                kept=[v for v in graph.order if counts.get(v) == 1], peak=sim.peak,
                recompute_cost=sim.recompute_cost, solve_seconds=time.perf_counter() - started,
                stats={"simulated_peak": sim.peak, "k": ck, "levels": cl, "cuts": rule, "depth": depth,
                       "max_mirror_count": max(counts.values()) - 1, "tried": tried})
