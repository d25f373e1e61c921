"""Eq. (1) and (2) of seed 000 §3 worked by hand on small graphs."""

import pytest

from remat import Graph, GraphError, canonical
from remat.lowerset import Poset


def mlp() -> Graph:
    """Seed 000 Figure 1's three-layer perceptron: linear-relu-linear-relu-linear."""
    g = Graph(name="mlp")
    g.add_node("l1", 4, 10)
    g.add_node("r1", 4, 1, ["l1"])
    g.add_node("l2", 3, 10, ["r1"])
    g.add_node("r2", 3, 1, ["l2"])
    g.add_node("l3", 1, 10, ["r2"])
    return g


def test_mlp_by_hand():
    g = mlp()
    p = Poset.of(g)
    stages = [["l1", "r1"], ["l2", "r2"], ["l3"]]
    terms = canonical.stage_terms(p, canonical.lowers_of_stages(p, stages))
    # stage 1: U_0 = ∅; 2M(V_1) = 16; δ+(L_1)\L_1 = {l2}; δ−(δ+(L_1))\L_1 = ∅; overhead T(l1)
    # stage 2: U_1 = {r1}; 2M(V_2) = 12; δ+\L = {l3}; overhead T(l2)
    # stage 3: U_2 = {r1, r2}; 2M(V_3) = 2; overhead T(l3) (∂(V) = ∅)
    assert [(t.cached, t.stage, t.consumers, t.siblings, t.overhead) for t in terms] == [
        (0, 16, 3, 0, 10), (4, 12, 1, 0, 10), (7, 2, 0, 0, 10)]
    assert canonical.peak(g, stages) == 19
    assert canonical.overhead(g, stages) == 30


def test_diamond_by_hand_exercises_the_sibling_term():
    g = Graph(name="diamond")
    g.add_node("a", 1, 1)
    g.add_node("b", 2, 1, ["a"])
    g.add_node("c", 3, 1, ["a"])
    g.add_node("d", 4, 1, ["b", "c"])
    p = Poset.of(g)
    stages = [["a"], ["b"], ["c", "d"]]
    terms = canonical.stage_terms(p, canonical.lowers_of_stages(p, stages))
    # stage 2: ∂(L_2) = {a, b}; δ+(L_2)\L_2 = {c, d}; δ−({b, c, d}) \ L_2 = {c}: c feeds d beside b
    assert [(t.cached, t.stage, t.consumers, t.siblings, t.overhead) for t in terms] == [
        (0, 2, 5, 0, 0), (1, 4, 7, 3, 0), (3, 14, 0, 0, 2)]
    assert canonical.peak(g, stages) == 17
    assert canonical.overhead(g, stages) == 2


def test_bad_sequences_are_rejected():
    g = mlp()
    with pytest.raises(GraphError, match="not a lower set"):
        canonical.peak(g, [["r1"], ["l1", "l2", "r2", "l3"]])
    with pytest.raises(GraphError, match="must end with"):
        canonical.peak(g, [["l1"]])
