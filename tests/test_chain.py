"""Graph breaks under one byte budget (``remat.compiled.chain``): the tail node and the bytes each
graph of a step reserves for the ones after it. Pure, hand-sized; the backend is tested with
torch.compile in tests/test_compiled.py."""

from hypothesis import given, settings
from hypothesis import strategies as st

from remat import Graph, schedule, simulate
from remat.compiled.chain import (TAIL, Recorder, Slot, Swappable, held_before, step_peak, tail_bytes, with_tail,
                                  without_tail)
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


def test_step_peak_counts_each_call_of_a_repeated_graph():
    a, b = Slot(0, False, after=6, need=10), Slot(1, False, after=1, need=4)
    assert step_peak([a]) == 10
    assert step_peak([a, a, a]) == 6 + 6 + 10     # the third call runs while two hold their leftovers
    assert step_peak([b, a, a, b]) == max(10 + 1, 1 + 6 + 10, 1 + 12 + 4)


class _Out:
    """An output tensor's stand-in: requires grad, and keeps the hook its backward would call."""

    requires_grad = True
    grad_fn = object()

    def __init__(self) -> None:
        self.hooks: list = []

    def register_hook(self, hook):
        self.hooks.append(hook)


def test_the_recorder_hands_over_the_calls_before_the_first_backward():
    got: list = []
    rec = Recorder(got.append)
    a, b = Slot(0, False), Slot(1, False)
    calls = [Swappable(lambda: (_Out(),), slot=s, record=rec.called) for s in (a, b)]
    outs = [calls[0](), calls[1](), calls[1]()]
    inference = Swappable(lambda: (1.0,), slot=a, record=rec.called)()  # no gradient: not part of a step
    assert inference == (1.0,) and not got
    outs[-1][0].hooks[0](None)  # the backward reaches the last call's output
    assert got == [[a, b, b]] and rec.finished
    assert all(len(o[0].hooks) == 1 for o in outs)
    calls[0]()  # later steps are not recorded
    outs[0][0].hooks[0](None)
    assert got == [[a, b, b]]


def test_the_recorder_tells_inputs_made_outside_the_graphs():
    """An input whose gradient function is not a compiled graph's came from eager autograd code,
    whose memory no plan sees."""
    import torch

    rec = Recorder(lambda calls: None)
    from_graph = _Out()
    from_graph.grad_fn = type("CompiledFunctionBackward", (), {})()
    rec.called(Slot(0, False), (_Out(),), (torch.ones(2), from_graph))
    assert not rec.eager_inputs
    rec.called(Slot(0, False), (_Out(),), (torch.ones(2, requires_grad=True) * 2,))  # MulBackward0
    assert rec.eager_inputs
