"""Re-forwarding (Feng & Huang 2018, seed 003): the kept set of least memory under eq. (1).

The paper stores a set V_R of forward values during the first forward and, during backward,
re-forwards each segment between stored values from its stored source. Its objective, eq. (1):

    l(V_R) + max over segments of l(segment interior)

is minimised as the paper does, in two modules: ``reforward_linear`` is Algorithm 1 (linear
graphs: accessibility graph and shortest path for every max term, with its skip rule) and
``reforward_tree`` is Algorithm 5 (arbitrary graphs: closed sets, splitting vertices, the three
closed-set types, maximal split, division tree). This module is the solver front-end.

Conventions:

- Graph inputs and parameters act as the source s (always in memory, l(s) = 0); a virtual target
  t with l(t) = 0 follows every sink. On a chain x1..xn, eq. (1) is then l(V_R) plus the largest
  run of unstored values between consecutive stored ones (or s, t).
- ``Plan.peak`` is eq. (1) of the returned kept set, generalised to any DAG as l(V_R) plus the
  largest weakly connected component of the graph without V_R (``objective``): each such
  component is re-forwarded from stored values as one segment. On chains it is exactly eq. (1).
  The algorithm's own value of the set, ``stats["solver_objective"]``, is never below it (an
  unexpanded branched set counts as one leap in the division tree); on chains they are equal.
- ``method="auto"`` runs Algorithm 1 on chains and Algorithm 5 on anything else; both give the
  same objective on chains (tested).

Where the paper's two assumptions (§4.1) fail:

- Segments with several sources or sinks: the division tree only ever leaps over closed sets
  (one source, one sink), so a region no closed set covers is never leapt over; its vertices end
  up as endpoints of a type-3 maximal split and are stored, and the objective counts them.
  The search is then exact within the division tree, not over all stored sets: on a diamond
  s -> a, b -> c, storing {a, b} can beat every set the tree offers (tested). Algorithm 4 as
  printed takes all vertices between v_k and v_t as the candidate s_kt; we take Definition 1's
  largest closed set, which may be only some branches of them (e.g. the 1x1 projection of a
  skip connection whose source also feeds the main path). A candidate that would overlap an
  accepted member (impossible by Lemma 1) is skipped, which only stores more
  (``stats["skipped_split_members"]``, 0 on every graph tried).
- Multi-input ops whose backward reads their inputs (the default on graphs here: "inputs and
  output"): the solver ignores this, as the paper does. The schedule (``schedule.from_kept``)
  recomputes whatever each backward step reads, so execution is always correct, but such an op can
  hold several re-forwarded segments at once, and eq. (1) never counts gradients. So ``Plan.peak``
  is the paper's estimate, not a bound on the simulated peak, which ``stats["simulated_peak"]``
  holds (on the zoo's ResNet152 and DenseNet201 graphs it is 4% and 2% above eq. (1)).
- Each value is recomputed at most once (``from_kept`` keeps a recomputed value until its last
  read), so the recompute cost is at most the forward cost of the values not kept.

Budget: Re-forwarding minimises memory, not time, so the plan never depends on ``budget``:
``budget=None`` returns the least-memory plan; a number returns the same plan with
``feasible = peak <= budget``. ``mode`` is ignored.

Tested (tests/test_reforward.py) against brute force over every stored subset on random chains
(eq. (1) written independently in the test), Algorithm 1 against Algorithm 5 on chains,
hand-computed values on residual and diamond graphs, closed sets against Definition 1, and the
simulator on random DAGs and hand-built networks.
"""

from __future__ import annotations

import time
from typing import Iterable

from networkx.utils import UnionFind

from ..errors import SolverError
from ..graph import Graph
from ..plan import Plan
from . import register
from .common import kept_plan
from .reforward_linear import Solution, solve_linear
from .reforward_tree import TreeSolution, solve_arbitrary

__all__ = ["METHODS", "Solution", "TreeSolution", "is_chain", "objective", "solve",
           "solve_arbitrary", "solve_linear"]

METHODS = ("auto", "linear", "arbitrary")


def objective(graph: Graph, kept: Iterable[str]) -> float:
    """Eq. (1) of a kept set on any DAG: l(V_R) plus the largest weakly connected component of
    the graph without V_R (each component is re-forwarded from stored values as one segment).
    On a chain the components are exactly the runs between consecutive stored vertices."""
    kept = set(kept)
    free = [v for v in graph.order if v not in kept]
    parts = UnionFind(free)
    for v in free:
        for u in graph[v].inputs:
            if u not in kept:
                parts.union(u, v)
    return graph.mem(kept) + max((graph.mem(c) for c in parts.to_sets()), default=0.0)


def is_chain(graph: Graph) -> bool:
    """True for a linear computation graph: x1 -> x2 -> ... -> xn, nothing else."""
    order = graph.order
    return all(graph[v].inputs == ((order[i - 1],) if i else ()) for i, v in enumerate(order))


def _min_budget(graph: Graph, **options) -> float:
    return solve(graph, None, **options).peak


@register("reforward", min_budget=_min_budget, budget_free=True)
def solve(graph: Graph, budget: float | None = None, method: str = "auto", **options) -> Plan:
    """Re-forwarding (Feng & Huang 2018): the kept set of least eq. (1) memory.

    ``method``: "linear" (Algorithm 1, chains only), "arbitrary" (Algorithm 5) or "auto"
    (Algorithm 1 on chains, Algorithm 5 otherwise).
    """
    started = time.perf_counter()
    kept, stats = _run(graph, method)
    return kept_plan(graph, kept, "reforward", budget, started, peak=objective(graph, kept),
                     mode=options.get("mode"), stored_mem=graph.mem(kept), **stats)


def _run(graph: Graph, method: str) -> tuple[list[str], dict]:
    """The kept ids and the stats of the chosen algorithm."""
    if method not in METHODS:
        raise SolverError(f"reforward: method must be one of {', '.join(METHODS)}, got {method!r}")
    chain = is_chain(graph)
    if method == "linear" and not chain:
        raise SolverError(f"reforward: method='linear' needs a chain, and graph {graph.name!r} "
                          "is not one; use method='arbitrary' or 'auto'")
    if method == "linear" or (method == "auto" and chain):
        order = graph.order
        sol = solve_linear([graph[v].mem for v in order])
        return [order[i] for i in sol.stored], {
            "algorithm": "linear (Algorithm 1)", "max_terms_tried": sol.max_terms_tried,
            "solver_objective": sol.objective}
    tree = solve_arbitrary(graph)
    return list(tree.kept), {
        "algorithm": "arbitrary (Algorithm 5)", "max_terms_tried": tree.max_terms_tried,
        "solver_objective": tree.objective, "division_tree_nodes": tree.tree_nodes,
        "skipped_split_members": tree.skipped_members}
