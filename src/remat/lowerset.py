"""Order theory of seed 000 §2 on a Graph: δ+, δ−, lower sets, boundaries, enumeration, {L_v}.

Sets of nodes are Python ints used as bitmasks over the graph's topological order (bit i is
``poset.order[i]``): union, intersection and subset tests are then single integer operations.
Operations that look at every member (δ±, M, T) unpack the bits into a numpy row and work on
boolean adjacency matrices, so they cost microseconds even on graphs of thousands of nodes.
``ids()`` and ``mask()`` convert between bitmasks and node ids at the API boundary.

Tested against direct set-based definitions on random DAGs (tests/test_lowerset.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np

from .errors import TooManyLowerSets
from .graph import Graph


def bits(mask: int) -> Iterator[int]:
    """Members of a bitmask, lowest bit first."""
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
    _pred: np.ndarray = field(repr=False, compare=False)   # bool [n, n]: row i = inputs of i
    _succ: np.ndarray = field(repr=False, compare=False)   # bool [n, n]: row i = consumers of i
    _bwd_in: np.ndarray = field(repr=False, compare=False)  # bool [n, n]: row i = inputs i's backward reads
    _mem: np.ndarray = field(repr=False, compare=False)
    _cost: np.ndarray = field(repr=False, compare=False)

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
        n = len(order)
        pred_b = np.zeros((n, n), dtype=bool)
        for v in order:
            pred_b[pos[v], [pos[u] for u in graph[v].inputs]] = True
        bwd_in = np.zeros((n, n), dtype=bool)
        for v in order:
            ins = set(graph[v].inputs)
            bwd_in[pos[v], [pos[u] for u in graph[v].saved if u in ins]] = True
        mem_of = tuple(graph[v].mem for v in order)
        cost_of = tuple(graph[v].cost for v in order)
        return cls(order, pos, tuple(pred), tuple(succ), mem_of, cost_of,
                   pred_b, pred_b.T.copy(), bwd_in, np.asarray(mem_of, dtype=float),
                   np.asarray(cost_of, dtype=float))

    # ---- bitmask <-> numpy row -----------------------------------------------------------
    def row(self, mask: int) -> np.ndarray:
        """The bitmask as a boolean numpy row of length n."""
        raw = np.frombuffer(mask.to_bytes((self.n + 7) // 8 or 1, "little"), dtype=np.uint8)
        return np.unpackbits(raw, bitorder="little")[: self.n].astype(bool)

    def from_row(self, row: np.ndarray) -> int:
        return int.from_bytes(np.packbits(row, bitorder="little").tobytes(), "little")

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
        return [self.order[i] for i in np.flatnonzero(self.row(mask))]

    # ---- M(S), T(S) -----------------------------------------------------------------------
    def mem(self, mask: int) -> float:
        return float(self._mem[self.row(mask)].sum()) if mask else 0.0

    def cost(self, mask: int) -> float:
        return float(self._cost[self.row(mask)].sum()) if mask else 0.0

    # ---- seed 000 §2 ----------------------------------------------------------------------
    def delta_plus(self, s: int) -> int:
        """δ+(S): nodes with an edge from some node of S."""
        return self.from_row(self._succ[self.row(s)].any(axis=0)) if s else 0

    def delta_minus(self, s: int) -> int:
        """δ−(S): nodes with an edge into some node of S."""
        return self.from_row(self._pred[self.row(s)].any(axis=0)) if s else 0

    def backward_inputs(self, s: int) -> int:
        """Inputs of members of S that their backward steps read (``Node.saved``): δ−(S) on
        abstract graphs, where every backward reads all its inputs."""
        return self.from_row(self._bwd_in[self.row(s)].any(axis=0)) if s else 0

    def is_lower_set(self, s: int) -> bool:
        """L is a lower set iff δ−(L) ⊆ L."""
        return self.delta_minus(s) & ~s == 0

    def boundary(self, lower: int) -> int:
        """∂(L) = δ−(V \\ L) ∩ L: members of L still read from outside L."""
        return self.delta_minus(self.full & ~lower) & lower

    def ancestor_sets(self) -> list[int]:
        """L_v = {w | v is reachable from w} for every v in order (seed 000 §4.3), by one pass
        in topological order: L_v is v plus the union of its inputs' sets."""
        out: list[int] = []
        for i in range(self.n):
            acc = 1 << i
            for j in bits(self.pred_mask[i]):
                acc |= out[j]
            out.append(acc)
        return out

    def pruned_family(self) -> list[int]:
        """{L_v | v ∈ V}, plus V itself so that a sequence can end in V when there are several sinks."""
        family = set(self.ancestor_sets())
        family.add(self.full)
        return sorted(family, key=lambda m: (m.bit_count(), m))

    def lower_sets(self, cap: int = 100_000, include_empty: bool = False,
                   units: list[int] | None = None) -> list[int]:
        """Every non-empty lower set (and ∅ if asked), each exactly once, by size.

        Walks the topological order deciding "in" or "out" per node; a node whose input is out
        must be out. ``units`` (bitmasks partitioning V, each unit's inputs in earlier units or
        itself) decides per unit instead: only lower sets that split no unit. Raises
        TooManyLowerSets once more than ``cap`` are found.
        """
        if units is None:
            units = [1 << i for i in range(self.n)]
        needs = []  # per unit: the nodes outside it that its members read
        for u in units:
            pred = 0
            for i in bits(u):
                pred |= self.pred_mask[i]
            needs.append(pred & ~u)
        found: list[int] = []
        stack: list[tuple[int, int]] = [(0, 0)]  # (next unit, chosen mask)
        k = len(units)
        while stack:
            i, chosen = stack.pop()
            if i == k:
                if chosen or include_empty:
                    found.append(chosen)
                    if len(found) > cap:
                        raise TooManyLowerSets(
                            f"graph has more than {cap} lower sets: raise the cap, or use "
                            f"solver='dp-approx' (pruned lower sets, seed 000 §4.3)"
                        )
                continue
            stack.append((i + 1, chosen))
            if needs[i] & ~chosen == 0:
                stack.append((i + 1, chosen | units[i]))
        found.sort(key=lambda m: (m.bit_count(), m))
        return found
