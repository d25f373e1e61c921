"""GreedyRemat: the XLA rematerialization heuristic, as seed 004 §4 describes it.

Start from a topological order and walk it. Whenever the memory at the current operation is
over the limit, pick among the values in memory the one whose rematerialization reduces memory
the most, drop it, and insert a copy of it right before its next use; repeat until under the
limit or nothing helps, then move on. Details the paper leaves open, settled as XLA's
``HloRematerialization`` does:

- a value read by the current operation, or whose inputs are not all in memory (its copy
  would have to bring them back), is not a candidate; the reduction is then its size, and
  ties go to the value whose next use is furthest away;
- a rematerialized copy is never rematerialized again, so every node is copied at most once
  and the pass ends (XLA keeps such copies off its candidate list too);
- the limit is ``limit=`` if given, else the budget, else 0 (reduce memory wherever it can).

Works on the schedule problem of seed 004 §2 (``problem="schedule"``: a node sequence for
``final``) and on the training problem through the joint graph (``remat.joint``).

Tested in tests/test_greedy.py: seed 004 Figure 1 (the heuristic finds the paper's schedule),
validity and M(σ) recomputed independently, at most one copy per node, NoRemat when never over
the limit, ~2x but linear on chains (§4.1); training plans pass the simulator in test_joint.py.
"""

from __future__ import annotations

import bisect
import time

from .. import joint
from ..graph import Graph
from ..plan import Plan
from . import register

_GAP = 1 << 20


class _Op:
    """One entry of the schedule being built; ``key`` orders the pending ones."""

    __slots__ = ("node", "key", "prev", "next")

    def __init__(self, node: str, key: int):
        self.node, self.key = node, key
        self.prev: _Op | None = None
        self.next: _Op | None = None


class _Pass:
    def __init__(self, graph: Graph, final: str, limit: float):
        self.g, self.final, self.limit = graph, final, limit
        order = joint.topological(graph, joint.ancestors(graph, [final]))
        self.pos = {v: i for i, v in enumerate(order)}
        ops = [_Op(v, i * _GAP) for i, v in enumerate(order)]
        for a, b in zip(ops, ops[1:]):
            a.next, b.prev = b, a
        self.head = ops[0]
        # future reads of each value's current copy, in schedule order
        self.readers: dict[str, list[_Op]] = {v: [] for v in order}
        for op in ops:
            for u in graph[op.node].inputs:
                self.readers[u].append(op)
        self.live: dict[str, float] = {}
        self.mem = 0.0
        self.copied: set[str] = set()      # rematerialized once: never again
        self.candidates: set[str] = set()  # live, not copied, inputs all live
        self.out: list[str] = []

    # ---- liveness bookkeeping ----
    def _eligible(self, v: str) -> bool:
        return (v in self.live and v not in self.copied and v != self.final
                and all(u in self.live for u in self.g[v].inputs))

    def _arrive(self, v: str) -> None:
        self.live[v] = self.g[v].mem
        self.mem += self.g[v].mem
        for w in (v, *self.g.succ[v]):
            if self._eligible(w):
                self.candidates.add(w)

    def _leave(self, v: str) -> None:
        self.mem -= self.live.pop(v)
        self.candidates.discard(v)
        for w in self.g.succ[v]:
            self.candidates.discard(w)

    # ---- the schedule under construction ----
    def _insert_before(self, at: _Op, node: str) -> _Op:
        lo = at.prev.key if at.prev else at.key - 2 * _GAP
        if at.key - lo < 2:
            self._relabel()
            lo = at.prev.key if at.prev else at.key - 2 * _GAP
        op = _Op(node, (lo + at.key) // 2)
        op.prev, op.next = at.prev, at
        if at.prev:
            at.prev.next = op
        at.prev = op
        return op

    def _relabel(self) -> None:
        op, i = self.head, 0
        while op:
            op.key, op, i = i * _GAP, op.next, i + 1

    def _remat(self, v: str) -> None:
        """Drop v now; a copy of it is computed right before its next use."""
        copy = self._insert_before(self.readers[v][0], v)
        for u in self.g[v].inputs:
            bisect.insort(self.readers[u], copy, key=lambda o: o.key)
        self.copied.add(v)
        self._leave(v)

    def _best(self, protected: set[str]) -> str | None:
        best, best_key = None, None
        for v in self.candidates:
            if v in protected or self.g[v].mem <= 0:
                continue
            key = (self.g[v].mem, self.readers[v][0].key, -self.pos[v])
            if best_key is None or key > best_key:
                best, best_key = v, key
        return best

    # ---- the walk ----
    def run(self) -> list[str]:
        op = self.head
        while op:
            v = op.node
            self._arrive(v)
            if self.mem > self.limit:
                protected = {v, *self.g[v].inputs}
                while self.mem > self.limit and (u := self._best(protected)) is not None:
                    self._remat(u)
            self.out.append(v)
            for u in self.g[v].inputs:
                assert self.readers[u][0] is op, "reads are consumed in schedule order"
                self.readers[u].pop(0)
                if not self.readers[u] and u != self.final:
                    self._leave(u)
            if not self.readers[v] and v != self.final:
                self._leave(v)
            self.head = op = op.next
            if op:
                op.prev = None
        return self.out


def greedy_sequence(graph: Graph, final: str, limit: float = 0.0) -> tuple[list[str], dict]:
    """GreedyRemat schedule of ``final`` under a memory ``limit``, and its statistics."""
    p = _Pass(graph, final, limit)
    seq = p.run()
    return seq, {"limit": limit, "copies": len(p.copied)}


@register("greedy", problems=("training", "schedule"))
def solve(graph: Graph, budget: float | None = None, *, problem: str = "training",
          final: str | None = None, limit: float | None = None, **options) -> Plan:
    """GreedyRemat (seed 004 §4): the XLA heuristic, rematerialize the largest value when over the limit."""
    started = time.perf_counter()
    if limit is None:
        limit = 0.0 if budget is None else budget
    if problem == "schedule":
        final = joint.resolve_final(graph, final)
        seq, stats = greedy_sequence(graph, final, limit)
        return joint.sequence_plan(graph, seq, final, "greedy", budget, started, **stats)
    return joint.training_plan(graph, budget, "greedy", lambda g, f: greedy_sequence(g, f, limit), started)
