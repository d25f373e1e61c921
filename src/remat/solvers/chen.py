"""Chen et al. 2016 (seed 002): sqrt(n) segments and memory planning with a budget.

Implemented:

- ``chen-sqrt``: seed 002 §4.3, "An O(sqrt(n)) memory cost algorithm": cut the network into
  k = round(sqrt(n)) segments of about n/k nodes each and keep only the segment outputs.
- ``chen-greedy``: seed 002 §4.3, Algorithm 3 ("Memory Planning with Budget"), run over the grid
  of B values of seed 002 appendix A ("Search over Budget B"): one run with B = 0 gives x (size
  of the kept inter-stage outputs) and y (largest stage), B0 = sqrt(x y); the candidates are the
  plans of B0 and of a size-6 linear grid on [B0/sqrt(2), sqrt(2) B0].

Configuration, as seed 001 appendix B configured Chen's method for its comparison:

- The topological order is a depth-first search on the computation graph. We use the post-order
  DFS from the sinks along the inputs (sinks and inputs visited in the graph's own order), which
  is how Chen's own framework (NNVM's ``DFSVisit``) orders a graph: each node comes right after
  everything it needs, so a side branch is not interleaved with the main path.
- The split candidates C are the articulation points of the undirected version of the graph
  (``networkx.articulation_points``). A graph without any (skip connections everywhere) gets the
  single stage L_1 = V.

Lowering: both solvers cut the DFS order after each chosen split point, so every stage is a
contiguous segment of a topological order and every prefix L_i is a lower set. The plans are then
judged exactly like the dp solvers' (``common.stage_plan``): ``peak`` is seed 000 eq. (2), the
overhead in ``stats["eq1_overhead"]`` is eq. (1), and ``feasible`` is eq. (2) peak <= budget.
Alg. 3's own estimates x and y only steer the grid, as in the paper, where the exact memory of
each candidate came from static allocation.

Budget semantics:

- ``chen-sqrt`` ignores the budget when planning: it returns the sqrt(n) segmentation, feasible
  iff its eq. (2) peak fits. ``budget=None`` is always feasible.
- ``chen-greedy`` with ``budget=None`` returns the grid candidate with the smallest eq. (2) peak
  (Chen's choice: the plan that balances the two costs best). With a numeric budget it returns,
  among the candidates whose eq. (2) peak fits, the one with the smallest eq. (1) overhead (ties:
  smaller peak, then grid order); if none fits, the least-peak candidate with ``feasible=False``.
  The candidate set does not depend on the budget, so feasibility is monotone in the budget (what
  ``remat.min_budget``'s binary search needs) and the overhead never rises as the budget grows.

Both ignore ``mode`` (Chen's method has no time/memory-centric variants). chen-greedy's ``stats``
also list the distinct grid plans: ``B`` (of the chosen one), ``candidate_B``, ``grid_peaks``,
``grid_overheads``.

Tested (tests/test_chen.py) against hand-computed stages, eq. (1) and eq. (2) values on a 9-node
chain, a residual chain (only block outputs are articulation points) and a graph without
articulation points; on random DAGs for the lower-set sequence, the simulator, eq. (2) agreement
with ``remat.canonical.peak`` and the budget rules; and against the ``dp-exhaustive`` optimum,
which chen-greedy's overhead must never beat, when that solver is registered.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

import networkx as nx

from .. import canonical
from ..graph import Graph
from ..lowerset import Poset
from ..plan import Plan
from . import register
from .common import stage_plan, within

GRID_SIZE = 6  # seed 002 appendix A: "a size 6 grid on [B/sqrt(2), sqrt(2)B]"


# ---- configuration (seed 001 appendix B) -------------------------------------------------------
def dfs_order(graph: Graph) -> list[str]:
    """Post-order DFS from the sinks along inputs: a topological order (NNVM's ``DFSVisit``).

    Iterative, so that a deep chain does not hit Python's recursion limit.
    """
    seen: set[str] = set()
    order: list[str] = []
    for sink in graph.sinks:
        if sink in seen:
            continue
        seen.add(sink)
        stack = [(sink, iter(graph[sink].inputs))]
        while stack:
            v, pending = stack[-1]
            nxt = next((u for u in pending if u not in seen), None)
            if nxt is None:
                stack.pop()
                order.append(v)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(graph[nxt].inputs)))
    return order


def split_candidates(graph: Graph) -> set[str]:
    """C: articulation points of the undirected computation graph."""
    return set(nx.articulation_points(graph.to_networkx().to_undirected()))


def segments(order: Sequence[str], splits: Sequence[str]) -> list[list[str]]:
    """Cut ``order`` right after each split node; the last segment always ends with ``order[-1]``."""
    cut = set(splits)
    stages: list[list[str]] = [[]]
    for v in order:
        stages[-1].append(v)
        if v in cut:
            stages.append([])
    return [s for s in stages if s]


# ---- seed 002 §4.3: sqrt(n) segments -------------------------------------------------------------
def sqrt_splits(order: Sequence[str], candidates: set[str]) -> list[str]:
    """Split points of k = round(sqrt(n)) segments: the candidate nearest to each j n / k.

    The nearest candidate to an increasing target is non-decreasing, so deduplicating keeps the
    splits in order; the last node never splits (nothing would follow it).
    """
    n = len(order)
    k = max(1, round(math.sqrt(n)))
    ends = [i + 1 for i, v in enumerate(order[:-1]) if v in candidates]  # segment length if cut here
    chosen: list[int] = []
    for j in range(1, k):
        if not ends:
            break
        target = j * n / k
        best = min(ends, key=lambda e: (abs(e - target), e))
        if not chosen or best > chosen[-1]:
            chosen.append(best)
    return [order[e - 1] for e in chosen]


# ---- seed 002 Algorithm 3 and appendix A -----------------------------------------------------------
@dataclass(frozen=True)
class Allocation:
    """Algorithm 3's output for one B: the split points (m(v) = 0), x and y."""

    budget: float
    splits: tuple[str, ...]
    x: float  # approximate cost to store inter-stage feature maps
    y: float  # approximate memory cost of each stage


def plan_with_budget(graph: Graph, order: Sequence[str], candidates: set[str], budget: float) -> Allocation:
    """Algorithm 3, line by line: split at a candidate once the running size exceeds B."""
    temp = x = y = 0.0
    splits: list[str] = []
    for v in order:  # a split at the last node is harmless: ``segments`` drops the empty tail
        temp += graph[v].mem
        if v in candidates and temp > budget:
            x, y = x + graph[v].mem, max(y, temp)
            splits.append(v)
            temp = 0.0
    return Allocation(budget, tuple(splits), x, y)


def budget_grid(graph: Graph, order: Sequence[str], candidates: set[str]) -> list[float]:
    """Appendix A: B0 = sqrt(x y) from the B = 0 run, then 6 points on [B0/sqrt(2), sqrt(2) B0]."""
    first = plan_with_budget(graph, order, candidates, 0.0)
    b0 = math.sqrt(first.x * first.y)
    lo, hi = b0 / math.sqrt(2), b0 * math.sqrt(2)
    return [b0] + [lo + (hi - lo) * i / (GRID_SIZE - 1) for i in range(GRID_SIZE)]


@dataclass(frozen=True)
class Candidate:
    """One grid point's plan, judged by seed 000 eq. (1) and (2)."""

    budget: float  # the B of Algorithm 3 that produced it
    stages: tuple[tuple[str, ...], ...]
    peak: float
    overhead: float


def greedy_candidates(graph: Graph) -> list[Candidate]:
    """The distinct plans of the grid search, in grid order (B0 first)."""
    order, cands = dfs_order(graph), split_candidates(graph)
    p = Poset.of(graph)
    out: dict[tuple, Candidate] = {}
    for b in budget_grid(graph, order, cands):
        stages = tuple(tuple(s) for s in segments(order, plan_with_budget(graph, order, cands, b).splits))
        if stages not in out:
            terms = canonical.stage_terms(p, canonical.lowers_of_stages(p, [list(s) for s in stages]))
            out[stages] = Candidate(b, stages, max(t.memory for t in terms), sum(t.overhead for t in terms))
    return list(out.values())


def choose(candidates: list[Candidate], budget: float | None) -> Candidate:
    """The budget rule of the module docstring."""
    least_peak = min(candidates, key=lambda c: (c.peak, c.overhead))  # min() keeps grid order on ties
    if budget is None:
        return least_peak
    fitting = [c for c in candidates if within(c.peak, budget)]
    return min(fitting, key=lambda c: (c.overhead, c.peak)) if fitting else least_peak


# ---- solvers -------------------------------------------------------------------------------------
@register("chen-sqrt", budget_free=True)
def solve_sqrt(graph: Graph, budget: float | None = None, **options) -> Plan:
    """Chen et al. sqrt(n) segments (seed 002 §4.3), split at articulation points of a DFS order."""
    started = time.perf_counter()
    order = dfs_order(graph)
    splits = sqrt_splits(order, split_candidates(graph))
    return stage_plan(graph, segments(order, splits), "chen-sqrt", budget, started, mode=None,
                      segments_target=max(1, round(math.sqrt(len(order)))))


@register("chen-greedy")
def solve_greedy(graph: Graph, budget: float | None = None, **options) -> Plan:
    """Chen et al. memory planning with budget (seed 002 Alg. 3) with the grid search over B."""
    started = time.perf_counter()
    candidates = greedy_candidates(graph)
    best = choose(candidates, budget)
    return stage_plan(graph, [list(s) for s in best.stages], "chen-greedy", budget, started, mode=None,
                      B=best.budget, candidate_B=[c.budget for c in candidates],
                      grid_peaks=[c.peak for c in candidates],
                      grid_overheads=[c.overhead for c in candidates])
