"""Graph breaks under one byte budget (``remat.compiled.chain``): the tail node and the bytes each
graph of a step reserves for the ones after it. Pure, hand-sized; the backend is tested with
torch.compile in tests/test_compiled.py."""

from hypothesis import given, settings
from hypothesis import strategies as st

from remat import Graph, schedule, simulate
from remat.compiled.chain import TAIL, Slot, held_before, tail_bytes, with_tail, without_tail
from remat.runtime import _executed

from strategies import dags


def test_the_tail_adds_its_bytes_at_the_end_of_the_forward_only():
    g = Graph.chain(3)
    t = with_tail(g, 10)
    sim = simulate(t, schedule.vanilla(t))
    # fwd x1..x3: 1, 2, 3; the tail: 3 + 10 = 13, then freed; backward as without it: 5, 4, 2
    assert sim.timeline == [1, 2, 3, 13, 3, 5, 4, 2]
    assert sim.peak == 13
    assert simulate(g, without_tail(schedule.vanilla(t))).timeline == [1, 2, 3, 5, 4, 2]
    assert TAIL not in g and len(t) == len(g) + 1


@settings(max_examples=40, deadline=None)
@given(dags(max_nodes=12), st.floats(min_value=0, max_value=50))
def test_a_plan_on_the_tail_graph_runs_on_the_graph_and_fits_less(g, tail):
    """Any solver's plan made with a tail, stripped of it, is a valid schedule of the graph whose
    peak is no higher, and the memory at the end of its forward plus the tail fits the plan's peak."""
    import remat

    t = with_tail(g, tail)
    plan = remat.solve(t, None, solver="chen-greedy")
    steps, sim_t = _executed(t, plan)
    mine = without_tail(steps)
    sim = simulate(g, mine)
    assert sim.peak <= sim_t.peak
    assert len(mine) == len(steps) - 2  # its forward and its (empty) backward step
    at_tail = next(k for k, s in enumerate(steps) if s == ("fwd", TAIL))
    assert sim_t.timeline[at_tail] <= sim_t.peak


def test_tail_bytes_are_what_the_graphs_after_need_on_top():
    chain = [Slot(0, True, after=6), Slot(1, True, after=5, need=7), Slot(2, False, after=1, need=4)]
    assert held_before(chain, 0) == 0 and held_before(chain, 2) == 11
    assert tail_bytes(chain, 0) == max(7, 5 + 4)   # graph 2 runs while graph 1 holds 5
    assert tail_bytes(chain, 1) == 4
    assert tail_bytes(chain, 2) == 0
