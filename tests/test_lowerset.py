"""Seed 000 §2 operations on bitmasks, checked against the set-based definitions."""

from itertools import combinations

from hypothesis import given, settings

from remat.lowerset import Poset
from strategies import dags


def _subsets(vs):
    for k in range(len(vs) + 1):
        yield from (set(c) for c in combinations(vs, k))


def _edges(g):
    return {(u, v) for v in g.order for u in g[v].inputs}


@settings(max_examples=60, deadline=None)
@given(dags(max_nodes=6))
def test_operations_match_definitions(g):
    p = Poset.of(g)
    V = set(g.order)
    E = _edges(g)
    lowers = []
    for S in _subsets(sorted(V)):
        m = p.mask(S)
        dplus = {v for v in V if any((s, v) in E for s in S)}
        dminus = {v for v in V if any((v, s) in E for s in S)}
        assert set(p.ids(p.delta_plus(m))) == dplus
        assert set(p.ids(p.delta_minus(m))) == dminus
        is_lower = not any((v, w) in E for v in V - S for w in S)
        assert p.is_lower_set(m) == is_lower
        if is_lower:
            lowers.append(m)
            outside_preds = {v for v in V if any((v, w) in E for w in V - S)}
            assert set(p.ids(p.boundary(m))) == outside_preds & S
    # enumeration: every lower set exactly once (with ∅ when asked)
    assert sorted(p.lower_sets(include_empty=True)) == sorted(lowers)
    # pruned family: L_v = {w | v reachable from w}, each a lower set, plus V
    for v in g.order:
        reach = {v}
        frontier = [v]
        while frontier:
            x = frontier.pop()
            for u in g[x].inputs:
                if u not in reach:
                    reach.add(u)
                    frontier.append(u)
        assert p.mask(reach) in p.pruned_family()
        assert p.ancestor_sets()[p.pos[v]] == p.mask(reach)
    assert p.full in p.pruned_family()
    assert all(p.is_lower_set(m) for m in p.pruned_family())


def test_enumeration_cap_names_the_way_out():
    import pytest
    from remat import Graph
    from remat.lowerset import TooManyLowerSets
    g = Graph()
    for i in range(12):  # an antichain has 2^12 lower sets
        g.add_node(f"v{i}", 1, 1)
    with pytest.raises(TooManyLowerSets, match="dp-approx"):
        Poset.of(g).lower_sets(cap=100)
