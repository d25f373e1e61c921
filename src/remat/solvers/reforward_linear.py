"""Re-forwarding on linear computation graphs: seed 003 §3, Algorithm 1.

Every vertex-pair cost l(v_i, v_j) is tried as the max term C, in descending order; for each C
the accessibility graph (an edge v_a -> v_b iff l(v_a, v_b) <= C) is searched for the shortest
source-target path, the lightest stored set; the actual max term B of that solution lets every
C' in [B, C) be skipped (step 7). One exact early exit the paper does not describe: a smaller C
only removes accessibility edges, so the stored memory S(C) never falls as C falls, and the loop
stops once S(C) alone reaches the best objective found.

The shortest path and the max-term loop are shared with the arbitrary-graph solver
(``reforward_tree``), whose splittable closed sets are linear sequences of segments.

Tested in tests/test_reforward.py against brute force over every stored subset of random chains.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, Sequence


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
class Partial:
    """A sub-problem's answer under one max term: stored memory, actual max term, stored set."""

    stored_mem: float
    max_term: float
    stored: tuple[int, ...]


# ---- the accessibility-graph shortest path (Algorithm 1, steps 3-4) ----------------------------
def _prefix(weights: Sequence[float], gaps: Sequence[float]) -> list[float]:
    """prefix[b]: memory of segments 1..b and points 0..b-1 of a linear sequence."""
    prefix = [0.0] * len(weights)
    for b in range(1, len(weights)):
        prefix[b] = prefix[b - 1] + weights[b - 1] + gaps[b]
    return prefix


def _leap(prefix: Sequence[float], weights: Sequence[float], a: int, b: int) -> float:
    """l(v_a, v_b): memory strictly between points a and b, the re-forward of that segment."""
    return prefix[b] - prefix[a] - weights[a]


def all_leaps(weights: Sequence[float], gaps: Sequence[float]) -> list[float]:
    """Every l(v_a, v_b) of a linear sequence: the max terms of Algorithm 1, step 2."""
    prefix = _prefix(weights, gaps)
    return [_leap(prefix, weights, a, b) for b in range(1, len(weights)) for a in range(b)]


def shortest_path(weights: Sequence[float], gaps: Sequence[float], limit: float,
                  labels: Sequence[int], expand: Callable[[int], Partial] | None = None) -> Partial:
    """Lightest stored subset of the inner points of a linear sequence under max term ``limit``.

    Points 0..K+1 have memory ``weights``, 0 at both ends (the caller stores those);
    ``gaps[b]`` is the interior memory of segment b, between points b-1 and b. The accessibility
    graph has an edge a -> b iff l(v_a, v_b) <= ``limit``; a segment too costly to leap is expanded
    instead: an edge b-1 -> b carrying ``expand(b)``, that segment's own solution. The shortest
    path in this DAG is ordered by (stored memory, actual max term), so ties go to the smaller max
    term. The stored set is the ``labels`` of the points on the path plus what the expanded
    segments store.
    """
    last = len(weights) - 1
    prefix = _prefix(weights, gaps)
    best: list[tuple[float, float]] = [(0.0, 0.0)] + [(float("inf"), float("inf"))] * last
    back: list[tuple[int, Partial | None]] = [(-1, None)] * (last + 1)
    for b in range(1, last + 1):
        if gaps[b] > limit:
            sub = expand(b)
            s, m = best[b - 1]
            best[b] = (s + sub.stored_mem + weights[b], max(m, sub.max_term))
            back[b] = (b - 1, sub)
            continue
        for a in range(b - 1, -1, -1):
            leap = _leap(prefix, weights, a, b)
            if leap > limit:
                break  # leaps only grow as a moves left
            s, m = best[a]
            cand = (s + weights[b], max(m, leap))
            if cand < best[b]:
                best[b], back[b] = cand, (a, None)
    return Partial(*best[last], _path(back, labels))


def _path(back: Sequence[tuple[int, Partial | None]], labels: Sequence[int]) -> tuple[int, ...]:
    """The stored set along the back-pointers of ``shortest_path``."""
    stored: list[int] = []
    b = len(back) - 1
    while b > 0:
        a, sub = back[b]
        if b < len(back) - 1:
            stored.append(labels[b])
        if sub is not None:
            stored.extend(sub.stored)
        b = a
    return tuple(stored)


def search(max_terms: Sequence[float], solve_at: Callable[[float], Partial],
           nothing_stored: float) -> Solution:
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


# ---- Algorithm 1 --------------------------------------------------------------------------------
def solve_linear(mems: Sequence[float]) -> Solution:
    """Algorithm 1 on a chain with vertex memories ``mems``; stored indices are 0-based."""
    if not mems:
        return Solution((), 0.0, 0.0)
    weights = [0.0, *mems, 0.0]
    gaps = [0.0] * len(weights)
    labels = range(-1, len(mems) + 1)  # point b is vertex b - 1

    def solve_at(m: float) -> Partial:
        return shortest_path(weights, gaps, m, labels)

    return search(all_leaps(weights, gaps), solve_at, float(sum(mems)))
