"""The liveness simulator: exact figures on hand-sized schedules, and its refusals."""

import pytest

import remat
from remat import Graph, ScheduleError, schedule, simulate


def test_vanilla_chain_by_hand():
    g = Graph.chain(3)
    sim = simulate(g, schedule.vanilla(g))
    # fwd x1..x3: 1, 2, 3 live. bwd x3: + seed grad(x3) + grad(x2) = 5; then grad(x3) and x3 go.
    # bwd x2: x1, x2, grad(x2) + grad(x1) = 4. bwd x1: x1, grad(x1) = 2.
    assert sim.timeline == [1, 2, 3, 5, 4, 2]
    assert sim.peak == 5 and sim.recompute_cost == 0


def test_liveness_frees_values_nobody_reads_later():
    g = Graph()
    g.add_node("a", 10, 1, bwd_uses=[])           # a graph input's op: backward reads nothing
    g.add_node("b", 1, 1, ["a"], bwd_uses=["b"])  # like relu: backward reads only its output
    g.add_node("c", 1, 1, ["b"], bwd_uses=[])
    sim = simulate(g, schedule.vanilla(g))
    # a's last reader is fwd b, and b's backward does not need it: a is freed after step 1
    assert sim.timeline[:3] == [10, 11, 2]


def test_recompute_cost_counts_repeated_forwards():
    g = Graph.chain(3, cost=5)
    steps = [("fwd", "x1"), ("fwd", "x2"), ("free", "x2"), ("fwd", "x3"), ("bwd", "x3"),
             ("fwd", "x2"), ("bwd", "x2"), ("bwd", "x1")]
    with pytest.raises(ScheduleError, match=r"step 3 \(fwd x3\) reads 'x2', which is not in memory"):
        simulate(g, steps)
    steps = [("fwd", "x1"), ("fwd", "x2"), ("fwd", "x3"), ("free", "x2"), ("fwd", "x2"),
             ("bwd", "x3"), ("bwd", "x2"), ("bwd", "x1")]
    assert simulate(g, steps).recompute_cost == 5


@pytest.mark.parametrize("steps, message", [
    ([("fwd", "x1"), ("fwd", "x2"), ("bwd", "x1"), ("bwd", "x2")], "before all its consumers"),
    ([("fwd", "x1"), ("fwd", "x2"), ("bwd", "x2"), ("bwd", "x2")], "a second time"),
    ([("fwd", "x1"), ("fwd", "x2"), ("bwd", "x2")], "never back-propagates"),
    ([("fwd", "x1"), ("jump", "x2")], "unknown kind"),
    ([("fwd", "zz")], "unknown node"),
])
def test_invalid_schedules_are_rejected(steps, message):
    with pytest.raises(ScheduleError, match=message):
        simulate(Graph.chain(2), steps)


def test_stage_schedule_recomputes_eq1_minus_the_last_stage():
    g = Graph.chain(6)
    stages = [["x1", "x2"], ["x3", "x4"], ["x5", "x6"]]
    sim = simulate(g, schedule.from_stages(g, stages))
    assert sim.recompute_cost == remat.canonical.overhead(g, stages) - 2


def test_kept_schedule_recomputes_only_what_is_dropped():
    g = Graph.chain(5, cost=3)
    sim = simulate(g, schedule.from_kept(g, ["x1", "x3", "x5"]))
    assert sim.recompute_cost == 6  # x2 and x4, once each
