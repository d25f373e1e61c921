"""Re-forwarding on arbitrary computation graphs: seed 003 §4, Definitions 1-9, Algorithms 2-5.

``division_tree`` builds the division tree (Definition 9). Each closed set (Definition 1) is
classified into the three types: splittable (type 1, Definitions 3-4; the splitting vertices are
found as Algorithm 2 defines them, for all vertices at once: a vertex that no edge jumps over in a
topological order of the set), branched (type 2, Definition 5 / Algorithm 3: several connected
components; the edge v_i -> v_j is left out of every set, which Definition 1 allows) and
non-branched (type 3, Definition 6, divided by its maximal split, Definition 7 / Algorithm 4).
Algorithm 4's closed-set test is done with dominators: the vertices between v_k and v_t form a
closed set iff v_k dominates and v_t post-dominates each of them (one bitmask test per pair);
when some fail, the largest closed set s_kt (Definition 1) is the branches without a failing
vertex, where Algorithm 4 as printed would find no set at all.

``solve_arbitrary`` is Algorithm 5: for each max term m (the costs of all closed sets that can be
leapt over, descending, with Algorithm 1's skip rule), a closed set costing <= m is leapt over
whole; one costing more is expanded: a type-1 set runs the accessibility-graph shortest path over
its splitting vertices (an expanded child becomes a forced edge carrying its own solution), a
type-2 set leaps or expands each branch, a type-3 set stores the endpoints of its maximal split
and leaps or expands each member. Besides Algorithm 1's early exit, each closed set remembers its
last solution (m, B) and reuses it for any later m' in [B, m]: the same argument as the skip rule.

Vertices are numbered in topological order, 0 being a virtual source (the graph's inputs) and
n+1 a virtual target after every sink, both of memory 0; vertex sets are bitmasks.

Tested in tests/test_reforward.py: closed sets against Definition 1 checked edge by edge, the
speed-ups against trying every max term from scratch, equality with Algorithm 1 on chains.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterator

from networkx.utils import UnionFind

from ..graph import Graph
from ..lowerset import bits
from .reforward_linear import Partial, all_leaps, search, shortest_path


Member = tuple[int, int, int]  # a closed set inside another: (v_k, v_t, vertices between, bitmask)


@dataclass(frozen=True)
class Dag:
    """The graph with a virtual source 0 and target n+1; vertex i is ``graph.order[i-1]``.

    Vertex sets are bitmasks: ``desc``/``anc`` the strict descendants/ancestors of each vertex,
    ``dom``/``pdom`` the vertices it strictly dominates (every path from the source to them passes
    through it) / post-dominates (every path from them to the target does); ``ipdom`` the
    immediate post-dominator.
    """

    ids: list[str]
    mem: list[float]
    succ: list[list[int]]
    pred: list[list[int]]
    desc: list[int]
    anc: list[int]
    dom: list[int]
    pdom: list[int]
    ipdom: list[int]
    adj: list[int]  # neighbours of each vertex, either direction

    @classmethod
    def of(cls, graph: Graph) -> "Dag":
        order = graph.order
        n = len(order)
        index = {v: i + 1 for i, v in enumerate(order)}
        edges = [(index[u], index[v]) for v in order for u in graph[v].inputs]
        edges += [(0, index[v]) for v in order if not graph[v].inputs]
        edges += [(index[v], n + 1) for v in order if not graph.succ[v]]
        succ: list[list[int]] = [[] for _ in range(n + 2)]
        pred: list[list[int]] = [[] for _ in range(n + 2)]
        for u, v in edges:
            succ[u].append(v)
            pred[v].append(u)
        forward = list(range(n + 2))
        backward = forward[::-1]
        ipdom = _immediate_dominators(succ, backward)
        return cls(["<source>", *order, "<target>"], [0.0, *(graph[v].mem for v in order), 0.0],
                   succ, pred, _reach(succ, backward), _reach(pred, forward),
                   _subtrees(_immediate_dominators(pred, forward), backward),
                   _subtrees(ipdom, forward), ipdom,
                   [sum(1 << w for w in (*succ[v], *pred[v])) for v in forward])

    def mem_of(self, mask: int) -> float:
        return sum(self.mem[v] for v in bits(mask))


def _reach(nexts: list[list[int]], order: list[int]) -> list[int]:
    """Bitmask of everything reachable from each vertex along ``nexts``, visiting ``order``
    so that a vertex's ``nexts`` come before it."""
    out = [0] * len(nexts)
    for v in order:
        for w in nexts[v]:
            out[v] |= out[w] | (1 << w)
    return out


def _subtrees(parent: list[int], order: list[int]) -> list[int]:
    """Bitmask of each vertex's strict descendants in a tree given by ``parent`` (the root is
    its own parent), visiting ``order`` so that children come before their parent."""
    out = [0] * len(parent)
    for v in order:
        if parent[v] != v:
            out[parent[v]] |= out[v] | (1 << v)
    return out


def _immediate_dominators(pred: list[list[int]], order: list[int]) -> list[int]:
    """Immediate dominators in a DAG from ``order[0]``, its single source, ``order`` being a
    topological order: the nearest common dominator of a vertex's predecessors."""
    idom, depth = [0] * len(order), [0] * len(order)
    root = order[0]
    idom[root] = root
    for v in order[1:]:
        d = pred[v][0]
        for p in pred[v][1:]:
            while d != p:
                if depth[d] >= depth[p]:
                    d = idom[d]
                else:
                    p = idom[p]
        idom[v], depth[v] = d, depth[d] + 1
    return idom


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


def divide(dag: Dag, head: int, tail: int, interior: int) -> ClosedSet:
    """Build the division tree below closed set s_{head,tail} (Algorithm 5, step 2)."""
    node = ClosedSet(head, tail, interior, dag.mem_of(interior))
    members = list(bits(interior))  # vertex numbers follow a topological order
    splitting = _splitting_vertices(dag, head, tail, interior, members)
    if splitting:
        _divide_splittable(dag, node, splitting)
        return node
    branches = _branches(dag, interior, members)
    if len(branches) > 1:
        node.kind = 2
        node.children = tuple(divide(dag, head, tail, b) for b in branches)
        return node
    _divide_non_branched(dag, node, members)
    return node


def _splitting_vertices(dag: Dag, head: int, tail: int, interior: int,
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


def _divide_splittable(dag: Dag, node: ClosedSet, splitting: list[int]) -> None:
    """Type 1: the division is the segments between consecutive splitting vertices."""
    node.kind = 1
    node.points = (node.head, *splitting, node.tail)
    children: list[ClosedSet | None] = []
    for a, b in zip(node.points, node.points[1:]):
        between = dag.desc[a] & dag.anc[b]
        children.append(divide(dag, a, b, between) if between else None)
    node.children = tuple(children)


def _branches(dag: Dag, interior: int, members: list[int]) -> list[int]:
    """Algorithm 3 by connected components: each component of the interior is one branch."""
    parts = UnionFind(members)
    for u in members:
        for w in dag.succ[u]:
            if interior >> w & 1:
                parts.union(u, w)
    return [sum(1 << v for v in comp) for comp in parts.to_sets()]


def _divide_non_branched(dag: Dag, node: ClosedSet, members: list[int]) -> None:
    """Type 3: the division is the maximal split (Definition 7, Algorithm 4)."""
    node.kind = 3
    accepted, covered, skipped = maximal_split(dag, _candidates(dag, node, members))
    node.children = tuple(divide(dag, k, t, interior) for k, t, interior in accepted)
    node.endpoints = tuple(bits(node.interior & ~covered))
    node.skipped_members = skipped


def closed_subsets(dag: Dag, node: ClosedSet, members: list[int]) -> list[Member]:
    """Algorithm 4, steps 1-4: (v_k, v_t, s_kt) for every pair in [s_ij] but (v_i, v_j) with a
    closed set s_kt between them, s_kt being the largest one (Definition 1).

    A vertex between v_k and v_t has no edge from outside but from v_k iff v_k dominates it, and
    none to outside but to v_t iff v_t post-dominates it: when every vertex between them passes
    (one bitmask test), s_kt is all of them, as Algorithm 4 as printed takes it; otherwise s_kt
    is the branches between them that hold no failing vertex (Definition 1 allows a part of the
    vertices between v_k and v_t). Only post-dominators of v_k's successors can be such a v_t,
    which prunes the pairs.
    """
    found = []
    for k, t, between, failing in _candidates(dag, node, members):
        between = _settle(dag, between, failing)
        if between:
            found.append((k, t, between))
    return found


def _candidates(dag: Dag, node: ClosedSet, members: list[int]) -> Iterator[tuple[int, int, int, int]]:
    """(v_k, v_t, the vertices between them, those of them that fail the closed-set test), in
    ``closed_subsets``' order; the vertices between bound s_kt from above."""
    for k in (node.head, *members):
        for t in _post_dominators_of_successors(dag, k, node):
            if (k, t) == (node.head, node.tail):
                continue
            between = dag.desc[k] & dag.anc[t]
            if between:
                yield k, t, between, between & ~(dag.dom[k] & dag.pdom[t])


def _settle(dag: Dag, between: int, failing: int) -> int:
    """s_kt: the branches between v_k and v_t that hold no failing vertex."""
    return between & ~_flood(dag, failing, between) if failing else between


def _flood(dag: Dag, seeds: int, within: int) -> int:
    """Everything connected to ``seeds`` inside ``within`` (bitmasks)."""
    reached = frontier = seeds
    while frontier:
        around = 0
        for v in bits(frontier):
            around |= dag.adj[v]
        frontier = around & within & ~reached
        reached |= frontier
    return reached


def _maximal_split(found: list[Member]) -> tuple[list[Member], int, int]:
    """Algorithm 4, steps 5-6: the closed sets no other one contains, taken largest first.

    Returns the members, the union of their interiors and how many sets were skipped because
    they would overlap a member without lying inside it (impossible by Lemma 1; a guard).
    """
    found = sorted(found, key=lambda f: -(f[2].bit_count()))
    split = _Split()
    for member in found:
        split.offer(member)
    return split.accepted, split.covered, split.skipped


def maximal_split(dag: Dag, candidates: Iterator[tuple[int, int, int, int]]) -> tuple[list[Member], int, int]:
    """``_maximal_split(closed_subsets(...))`` that settles a pair's s_kt only when it could still
    count: largest bound first (a heap; a settled set goes back in at its own size, and comes out
    only when no bound is above it), and a pair whose bound lies inside the members already taken
    is dropped unsettled, as its s_kt would be. On ResNet-152 that leaves most of the 640,000
    floods undone. Same members in the same order: ties break by the pair's place in the list."""
    heap = [(-between.bit_count(), i, k, t, between, failing)
            for i, (k, t, between, failing) in enumerate(candidates)]
    heapq.heapify(heap)
    split = _Split()
    while heap:
        size, i, k, t, between, failing = heapq.heappop(heap)
        if failing < 0:  # settled: no other pair's s_kt can be larger
            split.offer((k, t, between))
        elif between & split.covered != between:
            between = _settle(dag, between, failing)
            if between:
                heapq.heappush(heap, (-between.bit_count(), i, k, t, between, -1))
    return split.accepted, split.covered, split.skipped


class _Split:
    """The members taken so far, offered largest first."""

    def __init__(self) -> None:
        self.accepted: list[Member] = []
        self.covered = self.ends = self.skipped = 0  # interiors and endpoints of the members

    def offer(self, member: Member) -> None:
        k, t, between = member
        pair = (1 << k) | (1 << t)
        if between & self.covered == between:
            return  # inside a member
        if between & (self.covered | self.ends) or pair & self.covered:
            self.skipped += 1
            return
        self.accepted.append(member)
        self.covered |= between
        self.ends |= pair


def _post_dominators_of_successors(dag: Dag, k: int, node: ClosedSet) -> set[int]:
    """Post-dominators, up to the set's tail, of v_k's successors inside closed set ``node``."""
    out: set[int] = set()
    for v in dag.succ[k]:
        if not node.interior >> v & 1:
            continue
        v = dag.ipdom[v]
        while v not in out:
            out.add(v)
            if v == node.tail:
                break
            v = dag.ipdom[v]
    return out


def tree_nodes(root: ClosedSet) -> Iterator[ClosedSet]:
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in node.children if c is not None)


def max_terms(dag: Dag, root: ClosedSet) -> list[float]:
    """Algorithm 5, step 1: the cost of every closed set that can be leapt over, and 0."""
    terms = [0.0]
    for node in tree_nodes(root):
        if node.kind == 1:
            terms += all_leaps(*_linear_view(dag, node))
        else:
            terms += [c.cost for c in node.children]
    return terms


def _linear_view(dag: Dag, node: ClosedSet) -> tuple[list[float], list[float]]:
    """A type-1 set as a linear sequence: point memories and segment interior memories."""
    weights = [0.0, *(dag.mem[p] for p in node.points[1:-1]), 0.0]
    gaps = [0.0] + [c.cost if c is not None else 0.0 for c in node.children]
    return weights, gaps


class TreeSolver:
    """Algorithm 5, steps 3-10: the lightest stored set under max term m, greedy on the tree."""

    def __init__(self, dag: Dag, root: ClosedSet) -> None:
        self.dag = dag
        self.root = root
        self.views = {id(n): _linear_view(dag, n) for n in tree_nodes(root) if n.kind == 1}
        self.last: dict[int, tuple[float, Partial]] = {}  # node -> (m it was solved at, answer)

    def solve(self, m: float) -> Partial:
        return self.expand(self.root, m)

    def expand(self, node: ClosedSet, m: float) -> Partial:
        """Solve an expanded closed set whose endpoints are stored. A solution found at m' stays
        optimal for every m in [its max term, m'] (same reasoning as Algorithm 1, step 7)."""
        cached = self.last.get(id(node))
        if cached is not None and cached[1].max_term <= m <= cached[0]:
            return cached[1]
        if node.kind == 1:
            weights, gaps = self.views[id(node)]
            part = shortest_path(weights, gaps, m, node.points,
                                 lambda b: self.expand(node.children[b - 1], m))
        else:
            part = self._members(node, m)
        self.last[id(node)] = (m, part)
        return part

    def _members(self, node: ClosedSet, m: float) -> Partial:
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
        return Partial(mem, top, tuple(stored))


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


def division_tree(graph: Graph) -> tuple[Dag, ClosedSet]:
    """Algorithm 5, step 2: the graph with its virtual ends, and its division tree."""
    dag = Dag.of(graph)
    n = len(graph)
    return dag, divide(dag, 0, n + 1, ((1 << n) - 1) << 1)


def solve_arbitrary(graph: Graph) -> TreeSolution:
    """Algorithm 5 on any DAG: build the division tree, then search the max terms."""
    dag, root = division_tree(graph)
    solver = TreeSolver(dag, root)
    sol = search(max_terms(dag, root), solver.solve, dag.mem_of(root.interior))
    nodes = list(tree_nodes(root))
    return TreeSolution(tuple(dag.ids[v] for v in sol.stored), sol.stored_mem, sol.max_term,
                        sol.max_terms_tried, len(nodes), sum(x.skipped_members for x in nodes))
