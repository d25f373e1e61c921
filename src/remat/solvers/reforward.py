"""Re-forwarding (Feng & Huang 2018, seed 003): the kept set of least memory, eq. (1).

The paper stores a set V_R of forward values during the first forward and, during backward,
re-forwards each segment between stored values from its stored source. Its objective, eq. (1):

    l(V_R) + max over segments of l(segment interior)

is minimised here exactly as the paper does:

- ``solve_linear`` is Algorithm 1 (§3): every vertex-pair cost l(v_i, v_j) is tried as the max
  term C, descending; for each C the accessibility graph (an edge v_a -> v_b iff l(v_a, v_b) <= C)
  is searched for the shortest source-target path (lightest stored set); the actual max term B of
  that solution lets every C' in [B, C) be skipped (step 7).
- ``solve_arbitrary`` is Algorithm 5 (§4.3) on the division tree (Definition 9). Closed sets
  (Definition 1) are classified into the three types: splittable (type 1, Definitions 3-4, found
  as Algorithm 2 does: a vertex no edge jumps over in a topological order of the set), branched
  (type 2, Definition 5 / Algorithm 3: several connected components, or the edge v_i -> v_j) and
  non-branched (type 3, Definition 6, divided by its maximal split, Definition 7 / Algorithm 4).
  For each max term m (the costs of all closed sets, descending, with Algorithm 1's skip rule), a
  closed set costing <= m is leapt over whole; one costing more is expanded: a type-1 set runs
  the accessibility-graph shortest path over its splitting vertices (expanded children become
  forced edges that carry their own solution), a type-2 set leaps or expands each branch, a
  type-3 set stores the endpoints of its maximal split and leaps or expands each member.

Two exact speed-ups the paper does not describe, both justified by monotonicity (a smaller m
only removes accessibility edges and forces expansions, so the stored memory S(m) never falls
as m falls): the search stops once S(m) alone reaches the best objective found, and each closed
set remembers its last solution (m, B) and reuses it for any later m' >= B.

Conventions and where the paper's assumptions fail:

- Graph inputs and parameters act as the source s (always in memory, l(s) = 0); a virtual
  target t with l(t) = 0 follows every sink. On a chain x1..xn, eq. (1) is then
  l(V_R) + the largest run of unstored values between consecutive stored ones (or s, t).
- ``Plan.peak`` is eq. (1) of the returned kept set, generalised to any DAG as l(V_R) plus the
  largest weakly connected component of the graph without V_R (``objective``); on chains this
  is exactly eq. (1). The division tree's own value of the same set, ``stats["tree_objective"]``,
  is never below it (an unexpanded branched set is one leap there).
- Assumption 1 (segments have one source and one sink): the division tree only ever leaps over
  closed sets, so a region that no such set covers is never leapt; its vertices end up as the
  endpoints of a type-3 maximal split and are stored (the objective counts them). Algorithm 4
  considers only the full set of vertices between each pair (v_k, v_t); a closed set that is a
  strict subset of it (one branch of several) is not a split member, so such vertices are stored
  too. A member that would overlap an accepted one (impossible by the paper's Lemma 1, guarded
  anyway) is skipped, which again only stores more.
- Assumption 2 (a multi-input op's backward does not read its inputs): graphs here default to
  "backward reads inputs and output". The solver ignores this, as the paper does; the schedule
  (``remat.schedule.from_kept``) recomputes whatever each backward step reads, so execution is
  always correct, but such an op may hold several re-forwarded segments at once, and eq. (1)
  also never counts gradients. So ``Plan.peak`` is the paper's estimate, not a bound on the
  simulated peak; the simulated peak is in ``stats["simulated_peak"]``.
- Each value is recomputed at most once (``from_kept`` keeps a recomputed value until its last
  read), so the recompute cost is at most the forward cost of the values not kept.

Budget: Re-forwarding minimises memory, not time, so the plan never depends on ``budget``:
``budget=None`` returns the least-memory plan; a number returns the same plan with
``feasible = peak <= budget``. ``mode`` is ignored.

Tested (tests/test_reforward.py) against brute force over every stored subset on random chains
(eq. (1) written independently in the test), the linear solver against the arbitrary-graph solver
on chains, hand-computed values on residual and diamond graphs, and the simulator on random DAGs.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from ..graph import Graph
from ..plan import Plan
from . import register
from .common import kept_plan

METHODS = ("auto", "linear", "arbitrary")


# ---- results ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Solution:
    """A stored set with its eq. (1) terms: ``stored_mem`` + ``max_term`` = ``objective``."""

    stored: tuple[int, ...]   # indices into the solver's vertex numbering
    stored_mem: float
    max_term: float
    max_terms_tried: int = 0

    @property
    def objective(self) -> float:
        return self.stored_mem + self.max_term


@dataclass(frozen=True)
class _Partial:
    """A sub-problem's answer under one max term: stored memory, actual max term, stored set."""

    stored_mem: float
    max_term: float
    stored: tuple[int, ...]

    def key(self) -> tuple[float, float]:
        return (self.stored_mem, self.max_term)


_EMPTY = _Partial(0.0, 0.0, ())


# ---- the accessibility-graph shortest path (Algorithm 1, steps 3-4) ----------------------------
def _shortest_path(weights: Sequence[float], gaps: Sequence[float], limit: float,
                   labels: Sequence[int], expand=None) -> _Partial:
    """Lightest stored subset of the inner points of a linear sequence under max term ``limit``.

    Points 0..K+1 have memory ``weights`` (points 0 and K+1 are stored by the caller and not
    counted); ``gaps[b]`` is the interior memory of segment b between points b-1 and b. The
    accessibility graph has an edge a -> b iff the leap l(a, b) (segments and points strictly
    between) is <= ``limit``; a segment too costly to leap is expanded instead, an edge b-1 -> b
    carrying ``expand(b)``, its own solution. Shortest path on this DAG, ordered by (stored
    memory, actual max term), so ties go to the smaller max term. The stored set is returned as
    ``labels`` of the points plus whatever the expanded segments store.
    """
    k1 = len(weights) - 1
    prefix = [0.0] * (k1 + 1)  # prefix[b] = memory of segments 1..b and points 1..b-1
    for b in range(1, k1 + 1):
        prefix[b] = prefix[b - 1] + (weights[b - 1] if b > 1 else 0.0) + gaps[b]
    best: list[tuple[float, float]] = [(0.0, 0.0)] + [(float("inf"), float("inf"))] * k1
    back: list[tuple[int, _Partial | None]] = [(-1, None)] * (k1 + 1)
    for b in range(1, k1 + 1):
        wb = weights[b] if b < k1 else 0.0
        if gaps[b] > limit:
            sub = expand(b)
            s, m = best[b - 1]
            best[b] = (s + sub.stored_mem + wb, max(m, sub.max_term))
            back[b] = (b - 1, sub)
            continue
        for a in range(b - 1, -1, -1):
            leap = _leap(prefix, weights, a, b)
            if leap > limit:
                break  # leaps only grow as a moves left
            s, m = best[a]
            cand = (s + wb, max(m, leap))
            if cand < best[b]:
                best[b], back[b] = cand, (a, None)
    stored: list[int] = []
    b = k1
    while b > 0:
        a, sub = back[b]
        if b < k1:
            stored.append(labels[b])
        if sub is not None:
            stored.extend(sub.stored)
        b = a
    return _Partial(best[k1][0], best[k1][1], tuple(stored))


def _leap(prefix: Sequence[float], weights: Sequence[float], a: int, b: int) -> float:
    """l(a, b): memory strictly between points a and b (the re-forward of that segment)."""
    return prefix[b] - prefix[a] - (weights[a] if a > 0 else 0.0)


def _all_leaps(weights: Sequence[float], gaps: Sequence[float]) -> list[float]:
    """Every l(a, b) of a linear sequence: the max-term list of Algorithm 1, step 2."""
    k1 = len(weights) - 1
    prefix = [0.0] * (k1 + 1)
    for b in range(1, k1 + 1):
        prefix[b] = prefix[b - 1] + (weights[b - 1] if b > 1 else 0.0) + gaps[b]
    return [_leap(prefix, weights, a, b) for b in range(1, k1 + 1) for a in range(b)]


def _search(max_terms: Sequence[float], solve_at, nothing_stored: float) -> Solution:
    """Algorithm 1's (and Algorithm 5's, step 3) loop over max terms with the skip rule.

    ``solve_at(m)`` returns the lightest solution whose leaps are all <= m. Terms are tried in
    descending order; after a solution with actual max term B, every term in [B, m) gives the
    same solution and is skipped (Algorithm 1, step 7). The loop stops once the stored memory
    alone reaches the best objective, since it can only grow as m falls.
    """
    terms = sorted(set(max_terms))
    best = Solution((), 0.0, nothing_stored)
    tried = 0
    i = len(terms) - 1
    while i >= 0:
        r = solve_at(terms[i])
        tried += 1
        if r.stored_mem + r.max_term < best.objective:
            best = Solution(tuple(sorted(r.stored)), r.stored_mem, r.max_term)
        if r.stored_mem >= best.objective:
            break
        i = bisect.bisect_left(terms, r.max_term) - 1
    return Solution(best.stored, best.stored_mem, best.max_term, tried)


# ---- linear computation graphs (§3, Algorithm 1) ------------------------------------------------
def solve_linear(mems: Sequence[float]) -> Solution:
    """Algorithm 1 on a chain with vertex memories ``mems``; stored indices are 0-based."""
    if not mems:
        return Solution((), 0.0, 0.0)
    weights = [0.0, *mems, 0.0]
    gaps = [0.0] * len(weights)

    def solve_at(m: float) -> _Partial:
        return _shortest_path(weights, gaps, m, labels)

    labels = range(-1, len(mems) + 1)
    return _search(_all_leaps(weights, gaps), solve_at, float(sum(mems)))


# ---- arbitrary computation graphs (§4) ------------------------------------------------------------
def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


@dataclass
class _Dag:
    """The graph with a virtual source 0 and target n+1; vertex i is ``order[i-1]`` otherwise."""

    ids: list[str]
    mem: list[float]
    succ: list[list[int]]
    pred: list[list[int]]
    desc: list[int] = field(default_factory=list)  # strict descendants, bitmask
    anc: list[int] = field(default_factory=list)   # strict ancestors, bitmask
    _bad_out: dict[int, int] = field(default_factory=dict)
    _bad_in: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, graph: Graph) -> "_Dag":
        order = graph.order
        n = len(order)
        index = {v: i + 1 for i, v in enumerate(order)}
        succ: list[list[int]] = [[] for _ in range(n + 2)]
        pred: list[list[int]] = [[] for _ in range(n + 2)]
        for v in order:
            ins = [index[u] for u in graph[v].inputs] or [0]
            for u in ins:
                succ[u].append(index[v])
                pred[index[v]].append(u)
        for v in order:
            if not graph.succ[v]:
                succ[index[v]].append(n + 1)
                pred[n + 1].append(index[v])
        dag = cls(["<source>", *order, "<target>"], [0.0, *(graph[v].mem for v in order), 0.0],
                  succ, pred)
        dag.desc = [0] * (n + 2)
        for v in range(n + 1, -1, -1):
            for w in succ[v]:
                dag.desc[v] |= dag.desc[w] | (1 << w)
        dag.anc = [0] * (n + 2)
        for v in range(n + 2):
            for u in pred[v]:
                dag.anc[v] |= dag.anc[u] | (1 << u)
        return dag

    def mem_of(self, mask: int) -> float:
        return sum(self.mem[v] for v in _bits(mask))

    def bad_out(self, t: int) -> int:
        """Vertices with an edge to a vertex that is neither t nor an ancestor of t."""
        if t not in self._bad_out:
            ok = self.anc[t] | (1 << t)
            self._bad_out[t] = sum(1 << v for v in range(len(self.mem))
                                   if any(not ok >> w & 1 for w in self.succ[v]))
        return self._bad_out[t]

    def bad_in(self, k: int) -> int:
        """Vertices with an edge from a vertex that is neither k nor a descendant of k."""
        if k not in self._bad_in:
            ok = self.desc[k] | (1 << k)
            self._bad_in[k] = sum(1 << v for v in range(len(self.mem))
                                  if any(not ok >> u & 1 for u in self.pred[v]))
        return self._bad_in[k]


@dataclass
class ClosedSet:
    """A node of the division tree (Definition 9): closed set s_ij with its division.

    ``kind`` is 1 (splittable: ``points`` are v_i, its splitting vertices, v_j and ``children``
    the segments between them, None where a segment is a bare edge), 2 (branched: ``children``
    are its branches) or 3 (non-branched: ``children`` its maximal split, ``endpoints`` the
    interior vertices that are no member's interior, stored whenever the set is expanded).
    """

    head: int
    tail: int
    interior: int
    cost: float
    kind: int = 0
    points: tuple[int, ...] = ()
    children: tuple["ClosedSet | None", ...] = ()
    endpoints: tuple[int, ...] = ()
    skipped_members: int = 0


def _divide(dag: _Dag, head: int, tail: int, interior: int) -> ClosedSet:
    """Build the division tree below closed set s_{head,tail} (Algorithm 5, step 2)."""
    node = ClosedSet(head, tail, interior, dag.mem_of(interior))
    members = list(_bits(interior))  # vertex numbers follow a topological order
    splitting = _splitting_vertices(dag, head, tail, interior, members)
    if splitting:
        _divide_splittable(dag, node, splitting)
        return node
    branches = _branches(dag, interior, members)
    if len(branches) > 1:
        node.kind = 2
        node.children = tuple(_divide(dag, head, tail, b) for b in branches)
        return node
    _divide_non_branched(dag, node, members)
    return node


def _splitting_vertices(dag: _Dag, head: int, tail: int, interior: int,
                        members: list[int]) -> list[int]:
    """Algorithm 2 for every vertex at once: v_t splits s_ij iff every vertex is its ancestor or
    descendant with no edge between the two sides, i.e. iff no edge of [s_ij] jumps over v_t's
    position in a topological order. The edge v_i -> v_j is left out (Definition 1 allows E' -
    {e_ij}): as its own branch it holds no vertex, so it changes no leap or stored set."""
    local = {v: i for i, v in enumerate([head, *members, tail])}
    cover = [0] * (len(local) + 1)
    for u in (head, *members):
        for w in dag.succ[u]:
            if w in local and (u != head or w != tail) and local[w] - local[u] > 1:
                cover[local[u] + 1] += 1
                cover[local[w]] -= 1
    out, running = [], 0
    for i, v in enumerate(members, start=1):
        running += cover[i]
        if running == 0:
            out.append(v)
    return out


def _divide_splittable(dag: _Dag, node: ClosedSet, splitting: list[int]) -> None:
    """Type 1: the division is the segments between consecutive splitting vertices."""
    node.kind = 1
    node.points = (node.head, *splitting, node.tail)
    children: list[ClosedSet | None] = []
    for a, b in zip(node.points, node.points[1:]):
        between = dag.desc[a] & dag.anc[b]
        children.append(_divide(dag, a, b, between) if between else None)
    node.children = tuple(children)


def _branches(dag: _Dag, interior: int, members: list[int]) -> list[int]:
    """Algorithm 3 by connected components: each component of the interior is one branch."""
    parent = {v: v for v in members}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for u in members:
        for w in dag.succ[u]:
            if interior >> w & 1:
                parent[find(u)] = find(w)
    comps: dict[int, int] = {}
    for v in members:
        r = find(v)
        comps[r] = comps.get(r, 0) | (1 << v)
    return list(comps.values())


def _divide_non_branched(dag: _Dag, node: ClosedSet, members: list[int]) -> None:
    """Type 3: the division is the maximal split (Algorithm 4).

    Step 1-4: every pair (v_k, v_t) in [s_ij] but (v_i, v_j) whose vertices between them form a
    closed set (no edge leaves them except to v_k or v_t), tested with bitmasks. Steps 5-6: keep
    the sets no other such set contains, largest first.
    """
    node.kind = 3
    whole = node.interior | (1 << node.head) | (1 << node.tail)
    found: list[tuple[int, int, int, int]] = []
    for k in (node.head, *members):
        for t in _bits(dag.desc[k] & whole):
            if (k, t) == (node.head, node.tail):
                continue
            between = dag.desc[k] & dag.anc[t]
            if between and not between & (dag.bad_out(t) | dag.bad_in(k)):
                closure = between | (1 << k) | (1 << t)
                found.append((closure.bit_count(), closure, k, t))
    found.sort(key=lambda f: -f[0])
    accepted: list[tuple[int, int, int]] = []
    covered = skipped = 0
    for _, closure, k, t in found:
        if any(closure & c == closure for c, _, _ in accepted):
            continue
        between = closure & ~(1 << k) & ~(1 << t)
        if between & covered:
            skipped += 1
            continue
        accepted.append((closure, k, t))
        covered |= between
    node.children = tuple(_divide(dag, k, t, c & ~(1 << k) & ~(1 << t)) for c, k, t in accepted)
    node.endpoints = tuple(_bits(node.interior & ~covered))
    node.skipped_members = skipped


def _tree_nodes(root: ClosedSet) -> Iterator[ClosedSet]:
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in node.children if c is not None)


def _max_terms(dag: _Dag, root: ClosedSet) -> list[float]:
    """Algorithm 5, step 1: the cost of every closed set that can be leapt over, and 0."""
    terms = [0.0]
    for node in _tree_nodes(root):
        if node.kind == 1:
            terms += _all_leaps(*_linear_view(dag, node))
        else:
            terms += [c.cost for c in node.children]
    return terms


def _linear_view(dag: _Dag, node: ClosedSet) -> tuple[list[float], list[float]]:
    """A type-1 set as a linear sequence: point memories and segment interior memories."""
    weights = [0.0, *(dag.mem[p] for p in node.points[1:-1]), 0.0]
    gaps = [0.0] + [c.cost if c is not None else 0.0 for c in node.children]
    return weights, gaps


class _TreeSolver:
    """Algorithm 5, steps 3-10: the lightest stored set under max term m, greedy on the tree."""

    def __init__(self, dag: _Dag, root: ClosedSet) -> None:
        self.dag = dag
        self.root = root
        self.views = {id(n): _linear_view(dag, n) for n in _tree_nodes(root) if n.kind == 1}
        self.last: dict[int, tuple[float, _Partial]] = {}  # node -> (m it was solved at, answer)

    def solve(self, m: float) -> _Partial:
        return self.expand(self.root, m)

    def expand(self, node: ClosedSet, m: float) -> _Partial:
        """Solve an expanded closed set whose endpoints are stored. A solution found at m' stays
        optimal for every m in [its max term, m'] (same reasoning as Algorithm 1, step 7)."""
        cached = self.last.get(id(node))
        if cached is not None and cached[1].max_term <= m <= cached[0]:
            return cached[1]
        if node.kind == 1:
            weights, gaps = self.views[id(node)]
            part = _shortest_path(weights, gaps, m, node.points,
                                  lambda b: self.expand(node.children[b - 1], m))
        else:
            part = self._members(node, m)
        self.last[id(node)] = (m, part)
        return part

    def _members(self, node: ClosedSet, m: float) -> _Partial:
        """Types 2 and 3: leap over each member that fits m, expand the others."""
        stored = list(node.endpoints)
        mem = sum(self.dag.mem[v] for v in stored)
        top = 0.0
        for child in node.children:
            if child.cost <= m:
                top = max(top, child.cost)
                continue
            sub = self.expand(child, m)
            mem += sub.stored_mem
            top = max(top, sub.max_term)
            stored += sub.stored
        return _Partial(mem, top, tuple(stored))



@dataclass(frozen=True)
class TreeSolution:
    """Algorithm 5's answer on a graph: the kept ids and the division tree's own eq. (1) terms."""

    kept: tuple[str, ...]
    stored_mem: float
    max_term: float
    max_terms_tried: int
    tree_nodes: int
    skipped_members: int

    @property
    def objective(self) -> float:
        return self.stored_mem + self.max_term


def solve_arbitrary(graph: Graph) -> TreeSolution:
    """Algorithm 5 on any DAG: build the division tree, then search the max terms."""
    dag = _Dag.of(graph)
    n = len(dag.mem) - 2
    root = _divide(dag, 0, n + 1, ((1 << n) - 1) << 1)
    solver = _TreeSolver(dag, root)
    sol = _search(_max_terms(dag, root), solver.solve, dag.mem_of(root.interior))
    nodes = list(_tree_nodes(root))
    return TreeSolution(tuple(dag.ids[v] for v in sol.stored), sol.stored_mem, sol.max_term,
                        sol.max_terms_tried, len(nodes), sum(x.skipped_members for x in nodes))


def objective(graph: Graph, kept) -> float:
    """Eq. (1) of a kept set on any DAG: l(V_R) plus the largest weakly connected component of
    the graph without V_R (each component is re-forwarded from stored values as one segment).
    On a chain the components are exactly the runs between consecutive stored vertices."""
    kept = set(kept)
    parent = {v: v for v in graph.order if v not in kept}

    def find(v: str) -> str:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for v in parent:
        for u in graph[v].inputs:
            if u in parent:
                parent[find(u)] = find(v)
    sizes: dict[str, float] = {}
    for v in parent:
        r = find(v)
        sizes[r] = sizes.get(r, 0.0) + graph[v].mem
    return graph.mem(kept) + max(sizes.values(), default=0.0)


def is_chain(graph: Graph) -> bool:
    """True for a linear computation graph: x1 -> x2 -> ... -> xn, nothing else."""
    order = graph.order
    return all(graph[v].inputs == ((order[i - 1],) if i else ()) for i, v in enumerate(order))


def _min_budget(graph: Graph, **options) -> float:
    return solve(graph, None, **options).peak


@register("reforward", min_budget=_min_budget)
def solve(graph: Graph, budget: float | None = None, method: str = "auto", **options) -> Plan:
    """Re-forwarding (Feng & Huang 2018): the kept set of least eq. (1) memory.

    ``method``: "linear" (Algorithm 1, chains only), "arbitrary" (Algorithm 5) or "auto"
    (Algorithm 1 on chains, Algorithm 5 otherwise).
    """
    started = time.perf_counter()
    if method not in METHODS:
        raise ValueError(f"reforward: method must be one of {', '.join(METHODS)}, got {method!r}")
    chain = is_chain(graph)
    if method == "linear" and not chain:
        raise ValueError(f"reforward: method='linear' needs a chain, and graph {graph.name!r} "
                         "is not one; use method='arbitrary' or 'auto'")
    if method == "linear" or (method == "auto" and chain):
        order = graph.order
        sol = solve_linear([graph[v].mem for v in order])
        kept = [order[i] for i in sol.stored]
        stats = {"algorithm": "linear (Algorithm 1)", "max_terms_tried": sol.max_terms_tried,
                 "tree_objective": sol.objective}
    else:
        tree = solve_arbitrary(graph)
        kept = list(tree.kept)
        stats = {"algorithm": "arbitrary (Algorithm 5)", "max_terms_tried": tree.max_terms_tried,
                 "tree_objective": tree.objective, "division_tree_nodes": tree.tree_nodes,
                 "skipped_split_members": tree.skipped_members}
    peak = objective(graph, kept)
    return kept_plan(graph, kept, "reforward", budget, started, peak=peak,
                     mode=options.get("mode"), stored_mem=graph.mem(kept), **stats)
