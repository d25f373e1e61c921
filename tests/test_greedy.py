"""GreedyRemat (src/remat/solvers/greedy.py): the XLA heuristic of seed 004 §4.

Golden case: seed 004 Figure 1, where the heuristic must find the paper's 3-unit schedule.
Random DAGs: validity and M(σ) by an independent evaluator of the §2 definition, at most one
copy per node, and no rematerialization at all when the limit is never exceeded.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

import remat
from remat.graph import Graph
from remat.joint import joint_graph
from remat.simulate import simulate_sequence
from strategies import dags
from test_twremat import figure1, is_schedule, paper_peak, repeated_cost, with_final


def greedy(g: Graph, final: str, **options) -> remat.Plan:
    return remat.solve(g, options.pop("budget", None), solver="greedy", problem="schedule",
                       final=final, **options)


def test_figure1_over_the_limit_rematerializes_a():
    # at D, memory {A, B, C, D} = 4 > 3; B and C feed D, so A (no inputs) is dropped and
    # recomputed right before its next use, E: the paper's schedule <A,B,C,D,A,E>
    plan = greedy(figure1(), "E", budget=3)
    assert plan.schedule == list("ABCDAE")
    assert plan.peak == 3 and plan.feasible and plan.recompute_cost == 1


def test_figure1_within_the_limit_is_noremat():
    plan = greedy(figure1(), "E", budget=4)
    assert plan.schedule == list("ABCDE") and plan.peak == 4


def test_limit_option_overrides_budget():
    plan = greedy(figure1(), "E", budget=2, limit=4)
    assert plan.schedule == list("ABCDE") and not plan.feasible


@settings(max_examples=60, deadline=None)
@given(dags(max_nodes=10), st.sampled_from([0, 3, 8]))
def test_greedy_schedule_is_valid_and_peak_is_m_sigma(g, limit):
    g, f = with_final(g)
    plan = greedy(g, f, limit=limit)
    seq = plan.schedule
    assert is_schedule(g, seq, f) and seq[-1] == f
    assert plan.peak == paper_peak(g, seq) == simulate_sequence(g, seq, f).peak
    assert plan.recompute_cost == repeated_cost(g, seq)
    assert max(Counter(seq).values()) <= 2  # a copy is never copied again
    assert plan.stats["copies"] == len(seq) - len(set(seq))


@settings(max_examples=40, deadline=None)
@given(dags(max_nodes=10))
def test_greedy_without_pressure_is_noremat(g):
    g, f = with_final(g)
    none = remat.solve(g, None, solver="none", problem="schedule", final=f)
    plan = greedy(g, f, limit=none.peak)
    assert plan.schedule == none.schedule and plan.peak == none.peak


def test_greedy_halves_chain_training_memory_but_stays_linear():
    # seed 004 §4.1: GreedyRemat gives ~2x on chains yet grows linearly with depth
    peaks = {}
    for d in (50, 100, 200):
        j, end = joint_graph(Graph.chain(d))
        none = remat.solve(j, None, solver="none", problem="schedule", final=end).peak
        peaks[d] = greedy(j, end).peak
        assert peaks[d] <= 0.6 * none
    assert peaks[200] >= 3.5 * peaks[50]
