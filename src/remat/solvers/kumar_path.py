"""kumar-path: rematerialization through a path decomposition (seed 004 §5), as far as the sketch goes.

Seed 004 §5 sketches a second algorithm and defers it to a supplement that we do not have:

1. Add a directed Hamiltonian path, a *spine*, to G; the pathwidth grows by a factor of about 2.
2. Take a path decomposition X_1..X_m of the spined graph. With the nodes numbered along the
   spine, if X_c holds the last node u_n, then last(X) grows towards c from both sides.
3. Divide and conquer on the left and right sides of X_c; size and width of the pieces
   decrease, giving a polylogarithmic length factor at polylogarithmic memory.

What the sketch leaves open, and how it is filled here:

- Which path decomposition (pathwidth is NP-hard): the vertex-separation decomposition of a
  layout (a linear order of the nodes; bag i = the i-th node plus every earlier node with a
  neighbour at or after i), for the narrowest of four layouts: the topological order,
  Cuthill-McKee orders (breadth-first, neighbours by increasing degree) from f and from a
  pseudo-peripheral node, and the spectral order (Fiedler vector). Nodes adjacent to more than
  max(16, 2 sqrt(n)) others (a training graph's ``end``, reading the backward node of every
  source) are laid out first: they sit in every bag at any rate. On a training graph the
  topological order is as wide as the network is deep (each forward value waits for its backward
  step); the others interleave forward values with their backward steps, so a chain's joint graph
  gets width 2, and the spectral order is the narrowest on the TF-op graphs of seed 004 Table 1
  (breadth-first levels run ahead along thin side paths such as weight-decay sums). Lemma 1's
  shrink becomes: keep only the bags where some node's interval ends.
- Which spine, and how to keep the ~2x: a topological order that follows the layout, each next
  node the ready one (all inputs placed) nearest in the layout to the last one placed, so a
  spine edge joins nodes close in the layout and widens the bags only locally (the narrowest
  layout is chosen by the width *with* its spine). The spine edges only shape the decomposition;
  a node's schedule dependencies stay its real inputs (a valid schedule of the spined graph is
  one of G, and G's own edges suffice for Algorithm 1's argument).
- How a side is scheduled: with Algorithm 1's loop, run on the path (``twremat._Scheduler``,
  the same recursion and memoization as TWRemat): for each node of the separator bag, in
  topological order, compute its inputs in each side, then the node; then the remaining targets
  in each side. A call only schedules the ancestors of its targets within its piece: this is
  where the width shrinks, e.g. a forward value's inputs never need the backward nodes of a side.
- Which separator: the bag holding the last node (in spine order) of the piece, the sketch's X_c,
  taken at the position of that node's interval nearest the middle of the piece. Then the
  piece's last node is a separator node, so a call whose target is that node ends with it and
  makes no final pass over the sides. The sketch does not bound the sides: on a training graph
  X_c is at one end of the path (the last backward node sits next to the first forward one), and
  recursing on it alone is a linear recursion with linear memory. So X_c is taken only when
  neither side holds more than ``balance`` (default 2/3) of the piece's bags; otherwise the
  middle bag, the balanced separator of a path (Lemma 3), at most log_{3/2} m levels either way.
- The cut-off ``k`` of §4.3 (pieces of fewer than k bags in topological order), and with a budget
  and no k the largest power of two whose schedule fits, as ``twremat``.

Problems: the schedule problem of seed 004 §2 (``problem="schedule"``) and training through the
joint graph (``remat.joint``), as ``twremat``. ``plan.peak`` is M(σ) resp. the simulated peak.
``stats`` carry the layout chosen, the pathwidth of the spined graph, every layout's width
without and with its spine, bags, recursion depth and how many separators were the sketch's X_c.
The result does not depend on string hashing (layouts and ties follow the graph's order).

Where it wins and where it does not is measured in bench/bench_kumar_path.py
(bench/results/kumar_path.md). Tested in tests/test_seed_rest.py: Figure 1 of seed 004 by hand,
the decomposition's properties, validity and M(σ) on random DAGs, width 2 and log depth on the
joint graphs of chains.
"""

from __future__ import annotations

import bisect
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import networkx as nx

from ..errors import SolverError
from .. import joint
from ..graph import Graph
from ..plan import Plan
from ..simulate import simulate_sequence, simulate_training
from . import register
from .twremat import Component, _Scheduler, _cutoffs, undirected

BALANCE = 2 / 3


# ---- 1. a layout of G and its vertex-separation path decomposition -----------------------------
def hubs(adj: dict[str, set[str]]) -> set[str]:
    """Nodes adjacent to a large share of the graph (a training graph's ``end``, which reads the
    backward node of every source). Any layout keeps such a node in every bag, so they are laid
    out first and left out of the breadth-first searches, whose levels they would flatten."""
    bound = max(16, 2 * len(adj) ** 0.5)
    return {v for v, ns in adj.items() if len(ns) > bound}


def breadth_first(adj: dict[str, set[str]], starts: list[str], rank: dict[str, int]) -> list[str]:
    """Cuthill-McKee order: BFS from each start in turn (then from any node left), neighbours by
    increasing degree (ties: ``rank``)."""
    seen: set[str] = set()
    out: list[str] = []
    for start in [*starts, *sorted(adj, key=rank.__getitem__)]:
        if start in seen:
            continue
        seen.add(start)
        out.append(start)
        queue = deque([start])
        while queue:
            v = queue.popleft()
            for u in sorted((u for u in adj[v] if u not in seen), key=lambda u: (len(adj[u]), rank[u])):
                seen.add(u)
                out.append(u)
                queue.append(u)
    return out


def peripheral(adj: dict[str, set[str]], start: str, rank: dict[str, int], rounds: int = 6) -> str:
    """A pseudo-peripheral node of start's component (George & Liu): repeatedly the least-degree
    node of the last BFS level, while the eccentricity grows."""
    best, ecc = start, -1
    for _ in range(rounds):
        level, seen, depth = [best], {best}, 0
        while True:
            nxt = [u for v in level for u in adj[v] if u not in seen]
            if not nxt:
                break
            seen.update(nxt)
            level, depth = list(dict.fromkeys(nxt)), depth + 1
        if depth <= ecc:
            break
        ecc = depth
        best = min(level, key=lambda u: (len(adj[u]), rank[u]))
    return best


def separation(adj: dict[str, set[str]], layout: list[str]) -> tuple[int, dict[str, int]]:
    """Width of the layout's vertex-separation decomposition, and each node's last bag position."""
    pos = {v: i for i, v in enumerate(layout)}
    last = {v: max([pos[v], *(pos[u] for u in adj[v])]) for v in layout}
    delta = [0] * (len(layout) + 1)
    for v in layout:
        delta[pos[v]] += 1
        delta[last[v] + 1] -= 1
    width = run = 0
    for d in delta[:-1]:
        run += d
        width = max(width, run)
    return width - 1, last


def layouts(graph: Graph, adj: dict[str, set[str]], nodes: list[str], final: str) -> dict[str, list[str]]:
    """Candidate layouts: the topological order, Cuthill-McKee orders from the final node and from
    a pseudo-peripheral node, and the spectral order (Fiedler vector), hubs first."""
    rank = {v: i for i, v in enumerate(nodes)}
    big = hubs(adj)
    rest = {v: ns - big for v, ns in adj.items() if v not in big}
    first = sorted(big, key=rank.__getitem__)
    out = {"topological": nodes}
    if rest:
        seed = final if final in rest else min(rest, key=rank.__getitem__)
        out["bfs-final"] = first + breadth_first(rest, [seed], rank)
        out["bfs-peripheral"] = first + breadth_first(rest, [peripheral(rest, seed, rank)], rank)
        out["spectral"] = first + spectral(rest, rank)
    return out


def spectral(adj: dict[str, set[str]], rank: dict[str, int]) -> list[str]:
    """Nodes sorted by the Fiedler vector of each connected component (spectral sequencing):
    breadth-first levels run ahead along thin side paths (a weight-decay sum beside the layers),
    the Fiedler vector places each node by all its connections. Nodes and edges enter in ``rank``
    order and ties go by rank, so the layout does not depend on string hashing."""
    out: list[str] = []
    seen: set[str] = set()
    for start in sorted(adj, key=rank.__getitem__):
        if start in seen:
            continue
        comp, stack = [], [start]
        seen.add(start)
        while stack:
            v = stack.pop()
            comp.append(v)
            for u in adj[v]:
                if u not in seen:
                    seen.add(u)
                    stack.append(u)
        comp.sort(key=rank.__getitem__)
        if len(comp) <= 2:
            out += comp
            continue
        g = nx.Graph()
        g.add_nodes_from(comp)
        g.add_edges_from((u, v) for u in comp for v in sorted(adj[u], key=rank.__getitem__) if rank[u] < rank[v])
        fiedler = nx.fiedler_vector(g, method="tracemin_lu", seed=0)
        out += [v for _, _, v in sorted(zip(fiedler, range(len(comp)), comp))]
    return out


# ---- 2. the spine, and the path decomposition of the spined graph ---------------------------------
def spine(graph: Graph, nodes: list[str], layout: list[str]) -> list[str]:
    """A topological order of ``nodes`` that moves along the layout: each next node is the ready
    one (all inputs placed) nearest in the layout to the last placed one. Spine edges then join
    nodes close in the layout, so they widen the decomposition little (§5: by about 2x)."""
    pos = {v: i for i, v in enumerate(layout)}
    inside = set(nodes)
    missing = {v: sum(u in inside for u in graph[v].inputs) for v in nodes}
    ready = sorted((pos[v], v) for v in nodes if not missing[v])
    out: list[str] = []
    here = ready[0][0] if ready else 0
    while ready:
        i = bisect.bisect_left(ready, (here, ""))
        near = [j for j in (i - 1, i) if 0 <= j < len(ready)]
        j = min(near, key=lambda j: (abs(ready[j][0] - here), ready[j][0]))
        here, v = ready.pop(j)
        out.append(v)
        for w in graph.succ[v]:
            if w in inside:
                missing[w] -= 1
                if not missing[w]:
                    bisect.insort(ready, (pos[w], w))
    return out


def spined(graph: Graph, order: list[str]) -> dict[str, set[str]]:
    """Undirected adjacency of the graph on ``order``'s nodes plus the spine edges u_i - u_{i+1}."""
    adj = undirected(graph, set(order))
    for a, b in zip(order, order[1:]):
        adj[a].add(b)
        adj[b].add(a)
    return adj


@dataclass(frozen=True)
class PathDecomposition:
    """Bags X_0..X_{m-1} along a path, each node's bags an interval [lo, hi] (after Lemma 1)."""

    lo: dict[str, int]
    hi: dict[str, int]
    nbags: int
    width: int
    layout: str

    def bags(self) -> list[frozenset[str]]:
        """The bags themselves (for tests and small graphs: total size is n times the width)."""
        out: list[set[str]] = [set() for _ in range(self.nbags)]
        for v, a in self.lo.items():
            for i in range(a, self.hi[v] + 1):
                out[i].add(v)
        return [frozenset(b) for b in out]


def path_decomposition(adj: dict[str, set[str]], layout: list[str], name: str = "layout") -> PathDecomposition:
    """The layout's vertex-separation decomposition, shrunk (Lemma 1) to the bags where some
    node's interval ends: any other bag is a subset of the next one."""
    width, last = separation(adj, layout)
    pos = {v: i for i, v in enumerate(layout)}
    ends = sorted(set(last.values()))
    index = {p: j for j, p in enumerate(ends)}
    lo = {v: bisect.bisect_left(ends, pos[v]) for v in layout}
    hi = {v: index[last[v]] for v in layout}
    return PathDecomposition(lo, hi, len(ends), width, name)


def decomposition(graph: Graph, final: str) -> tuple[PathDecomposition, list[str], dict[str, list[int]]]:
    """For each candidate layout: its spine and the spined graph's decomposition; the narrowest
    one, its spine, and every layout's [width without, with spine]."""
    nodes = joint.topological(graph, joint.ancestors(graph, [final]))
    adj = undirected(graph, set(nodes))
    best, widths = None, {}
    for name, layout in layouts(graph, adj, nodes, final).items():
        order = spine(graph, nodes, layout)
        pd = path_decomposition(spined(graph, order), layout, name)
        widths[name] = [separation(adj, layout)[0], pd.width]
        if best is None or pd.width < best[0].width:
            best = (pd, order)
    return best[0], best[1], widths


# ---- 3. the separator hierarchy on the path ---------------------------------------------------------
class PathHierarchy:
    """Pieces [l, r] of the path, each split at its separator bag c; same interface as
    ``twremat.Hierarchy`` (components, path, child_of), so Algorithm 1's recursion runs on it."""

    def __init__(self, pd: PathDecomposition, order: list[str], balance: float = BALANCE):
        rank = {v: i for i, v in enumerate(order)}
        self.components: list[Component] = []
        self.path: dict[str, tuple[int, ...]] = {}
        self.from_last = 0
        stack: list[tuple[int, int, list[str], tuple[int, ...]]] = [(0, pd.nbags - 1, list(order), ())]
        while stack:
            l, r, nodes, above = stack.pop()
            cid = len(self.components)
            c = self._separator(pd, l, r, max(nodes, key=rank.__getitem__), balance)
            sep = [v for v in nodes if pd.lo[v] <= c <= pd.hi[v]]
            comp = Component(len(above), r - l + 1, sep, [], (*above, cid))
            self.components.append(comp)
            if above:
                self.components[above[-1]].children.append(cid)
            for v in sep:
                self.path[v] = comp.path
            right = [v for v in nodes if pd.lo[v] > c]
            left = [v for v in nodes if pd.hi[v] < c]
            for a, b, piece in ((c + 1, r, right), (l, c - 1, left)):
                if piece:
                    stack.append((a, b, piece, comp.path))

    def _separator(self, pd: PathDecomposition, l: int, r: int, last: str, balance: float) -> int:
        mid = (l + r) // 2
        c = min(max(mid, pd.lo[last]), pd.hi[last])  # X_c: a bag holding the piece's last node
        if max(c - l, r - c) <= balance * (r - l + 1):
            self.from_last += 1
            return c
        return mid

    def child_of(self, cid: int, x: str) -> int:
        return self.path[x][self.components[cid].depth + 1]


# ---- 4. the schedule --------------------------------------------------------------------------------
def kumar_path_sequence(graph: Graph, final: str, k: int | None = 1,
                        fits: Callable[[list[str]], bool] | None = None,
                        balance: float = BALANCE) -> tuple[list[str], dict]:
    """kumar-path(k) schedule of ``final`` and statistics; ``k=None`` with ``fits`` as twremat."""
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise SolverError(f"k must be an integer >= 1 (the recursion cut-off of seed 004 §4.3) or None, got {k!r}")
    if not (isinstance(balance, (int, float)) and 0.5 <= balance <= 1):
        raise SolverError(f"balance must be in [0.5, 1] (the largest side a separator may leave), got {balance!r}")
    t0 = time.perf_counter()
    pd, order, widths = decomposition(graph, final)
    h = PathHierarchy(pd, order, balance)
    t1 = time.perf_counter()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 3 * len(h.components) + 100))
    try:
        if k is not None or fits is None:
            k = k or 1
            seq = _schedule(graph, h, final, k)
        else:
            for k in reversed(_cutoffs(pd.nbags)):
                seq = _schedule(graph, h, final, k)
                if fits(seq):
                    break
    finally:
        sys.setrecursionlimit(limit)
    t2 = time.perf_counter()
    stats = {"pathwidth": pd.width, "layout": pd.layout, "layout_widths": widths, "bags": pd.nbags, "k": k,
             "balance": balance,
             "recursion_depth": max(c.depth for c in h.components) + 1,
             "separators_from_last_node": h.from_last, "components": len(h.components),
             "decompose_seconds": t1 - t0, "schedule_seconds": t2 - t1}
    return seq, stats


def _schedule(graph: Graph, h: PathHierarchy, final: str, k: int) -> list[str]:
    s = _Scheduler(graph, h, k)
    s.run(0, [final])
    return s.out


@register("kumar-path", problems=("training", "schedule"))
def solve(graph: Graph, budget: float | None = None, *, problem: str = "training",
          final: str | None = None, k: int | None = None, balance: float = BALANCE, **options) -> Plan:
    """Seed 004 §5: spine + path decomposition, divide and conquer around the last node's bag."""
    started = time.perf_counter()
    if problem == "schedule":
        final = joint.resolve_final(graph, final)
        fits = None if budget is None else (
            lambda seq: joint.within(simulate_sequence(graph, seq, final).peak, budget))
        seq, stats = kumar_path_sequence(graph, final, k, fits, balance)
        return joint.sequence_plan(graph, seq, final, "kumar-path", budget, started, **stats)

    def sequencer(j: Graph, end: str) -> tuple[list[str], dict]:
        fits = None if budget is None else (
            lambda seq: joint.within(simulate_training(graph, joint.joint_to_steps(seq, graph)).peak, budget))
        return kumar_path_sequence(j, end, k, fits, balance)

    return joint.training_plan(graph, budget, "kumar-path", sequencer, started)
