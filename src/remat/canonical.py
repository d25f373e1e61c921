"""The canonical strategy of seed 000 §3: overhead eq. (1) and peak memory eq. (2).

For an increasing lower-set sequence L_1 ≺ ... ≺ L_k = V with V_i = L_i \\ L_{i-1}:

    U_i   = ∂(L_1) ∪ ... ∪ ∂(L_i)                                   (cached after stage i)
    T     = Σ_i T(V_i \\ ∂(L_i))                                        (1)
    M(i)  = M(U_{i-1}) + 2 M(V_i) + M(δ+(L_i) \\ L_i) + M(δ−(δ+(L_i)) \\ L_i)   (2)
    peak  = max_i M(i)

Checked by hand on seed 000 Figure 1 and a diamond (tests/test_canonical.py) and used by the
exhaustive search, which is the DP solvers' reference.
"""

from __future__ import annotations

from dataclasses import dataclass

from .graph import Graph, GraphError
from .lowerset import Poset


@dataclass(frozen=True)
class StageTerms:
    """Eq. (2)'s parts for one stage, kept apart so a test can check each one."""

    cached: float      # M(U_{i-1})
    stage: float       # 2 M(V_i)
    consumers: float   # M(δ+(L_i) \ L_i)
    siblings: float    # M(δ−(δ+(L_i)) \ L_i)
    overhead: float    # T(V_i \ ∂(L_i))

    @property
    def memory(self) -> float:
        return self.cached + self.stage + self.consumers + self.siblings


def stage_term(p: Poset, prev: int, lower: int, cached: int) -> StageTerms:
    """Eq. (1) and (2) terms of the stage V_i = L_i \\ L_{i-1}, given the cache U_{i-1}."""
    v_i = lower & ~prev
    return StageTerms(
        cached=p.mem(cached),
        stage=2 * p.mem(v_i),
        consumers=p.mem(p.delta_plus(lower) & ~lower),
        siblings=p.mem(p.backward_inputs(p.delta_plus(lower) & ~lower) & ~lower),
        overhead=p.cost(v_i & ~p.boundary(lower)),
    )


def stage_terms(p: Poset, lowers: list[int]) -> list[StageTerms]:
    """Eq. (1) and (2) term by term for a sequence of lower-set bitmasks."""
    check_sequence(p, lowers)
    terms = []
    prev = cached = 0  # L_{i-1}, U_{i-1}
    for lower in lowers:
        terms.append(stage_term(p, prev, lower, cached))
        cached |= p.boundary(lower)
        prev = lower
    return terms


def check_sequence(p: Poset, lowers: list[int]) -> None:
    """Raise GraphError unless ``lowers`` is strictly increasing lower sets ending in V."""
    if not lowers or lowers[-1] != p.full:
        raise GraphError("a stage sequence must end with L_k = V (every node in some stage)")
    prev = 0
    for i, lower in enumerate(lowers, 1):
        if not p.is_lower_set(lower):
            missing = p.ids(p.delta_minus(lower) & ~lower)
            raise GraphError(f"L_{i} is not a lower set: it misses inputs {missing}")
        if lower & prev != prev or lower == prev:
            raise GraphError(f"L_{i} does not strictly contain L_{i-1}")
        prev = lower


def lowers_of_stages(p: Poset, stages: list[list[str]]) -> list[int]:
    """V_1..V_k as id lists -> L_1..L_k as bitmasks."""
    lowers, acc = [], 0
    for stage in stages:
        acc |= p.mask(stage)
        lowers.append(acc)
    return lowers


def overhead(graph: Graph, stages: list[list[str]]) -> float:
    """Eq. (1) for stages V_1..V_k."""
    p = Poset.of(graph)
    return sum(t.overhead for t in stage_terms(p, lowers_of_stages(p, stages)))


def peak(graph: Graph, stages: list[list[str]]) -> float:
    """Eq. (2) peak for stages V_1..V_k."""
    p = Poset.of(graph)
    return max(t.memory for t in stage_terms(p, lowers_of_stages(p, stages)))
