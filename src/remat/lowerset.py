"""Order theory of seed 000 §2 on a Graph: δ+, δ−, lower sets, boundaries, enumeration, {L_v}.

Sets of nodes are Python ints used as bitmasks over the graph's topological order (bit i is
``poset.order[i]``): union, intersection and subset tests are then single integer operations,
which is what makes the DP solvers fast in pure Python. ``ids()`` and ``mask()`` convert
between bitmasks and node ids at the API boundary.

Tested against direct set-based definitions on random DAGs (tests/test_lowerset.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from .graph import Graph


class TooManyLowerSets(RuntimeError):
    """Enumeration stopped at its cap; the message says how to proceed."""


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


@dataclass(frozen=True)
class Poset:
    """An immutable, indexed snapshot of a Graph for set operations."""

    order: tuple[str, ...]
    pos: dict[str, int]
    pred_mask: tuple[int, ...]
    succ_mask: tuple[int, ...]
    mem_of: tuple[float, ...]
    cost_of: tuple[float, ...]

    @classmethod
    def of(cls, graph: Graph) -> "Poset":
        order = graph.order
        pos = {v: i for i, v in enumerate(order)}
        pred = [0] * len(order)
        succ = [0] * len(order)
        for v in order:
            for u in graph[v].inputs:
                pred[pos[v]] |= 1 << pos[u]
                succ[pos[u]] |= 1 << pos[v]
        return cls(
            order, pos, tuple(pred), tuple(succ),
            tuple(graph[v].mem for v in order), tuple(graph[v].cost for v in order),
        )

    # ---- conversion ------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.order)

    @property
    def full(self) -> int:
        """The bitmask of V."""
        return (1 << self.n) - 1

    def mask(self, ids: Iterable[str]) -> int:
        m = 0
        for v in ids:
            m |= 1 << self.pos[v]
        return m

    def ids(self, mask: int) -> list[str]:
        """Node ids of a bitmask, in topological order."""
        return [self.order[i] for i in _bits(mask)]

    # ---- M(S), T(S) -----------------------------------------------------------------------
    def mem(self, mask: int) -> float:
        return sum(self.mem_of[i] for i in _bits(mask))

    def cost(self, mask: int) -> float:
        return sum(self.cost_of[i] for i in _bits(mask))

    # ---- seed 000 §2 ----------------------------------------------------------------------
    def delta_plus(self, s: int) -> int:
        """δ+(S): nodes with an edge from some node of S."""
        out = 0
        for i in _bits(s):
            out |= self.succ_mask[i]
        return out

    def delta_minus(self, s: int) -> int:
        """δ−(S): nodes with an edge into some node of S."""
        out = 0
        for i in _bits(s):
            out |= self.pred_mask[i]
        return out

    def is_lower_set(self, s: int) -> bool:
        """L is a lower set iff δ−(L) ⊆ L."""
        return self.delta_minus(s) & ~s == 0

    def boundary(self, lower: int) -> int:
        """∂(L) = δ−(V \\ L) ∩ L: members of L still read from outside L."""
        return self.delta_minus(self.full & ~lower) & lower

    def ancestors_closure(self, i: int) -> int:
        """L_v = {w | v is reachable from w}, v = order[i] (seed 000 §4.3)."""
        seen = 1 << i
        stack = [i]
        while stack:
            j = stack.pop()
            new = self.pred_mask[j] & ~seen
            seen |= new
            stack.extend(_bits(new))
        return seen

    def pruned_family(self) -> list[int]:
        """{L_v | v ∈ V}, plus V itself so that a sequence can end in V when there are several sinks."""
        family = {self.ancestors_closure(i) for i in range(self.n)}
        family.add(self.full)
        return sorted(family, key=lambda m: (m.bit_count(), m))

    def lower_sets(self, cap: int = 100_000, include_empty: bool = False) -> list[int]:
        """Every non-empty lower set (and ∅ if asked), each exactly once, by size.

        Walks the topological order deciding "in" or "out" per node; a node whose input is out
        must be out. Raises TooManyLowerSets once more than ``cap`` are found.
        """
        found: list[int] = []
        stack: list[tuple[int, int]] = [(0, 0)]  # (next index, chosen mask)
        n = self.n
        while stack:
            i, chosen = stack.pop()
            if i == n:
                if chosen or include_empty:
                    found.append(chosen)
                    if len(found) > cap:
                        raise TooManyLowerSets(
                            f"graph has more than {cap} lower sets: raise the cap, or use "
                            f"solver='dp-approx' (pruned lower sets, seed 000 §4.3)"
                        )
                continue
            stack.append((i + 1, chosen))
            if self.pred_mask[i] & ~chosen == 0:
                stack.append((i + 1, chosen | (1 << i)))
        found.sort(key=lambda m: (m.bit_count(), m))
        return found
