"""The liveness simulator: exact figures on hand-sized schedules, and its refusals."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat import canonical
from remat import Graph, ScheduleError, schedule, simulate

from strategies import dags


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
    ([("fwd", "x1"), ("bwd", "x2"), ("bwd", "x1")], "'x2', which was never computed"),
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
    assert sim.recompute_cost == canonical.overhead(g, stages) - 2


def test_kept_schedule_recomputes_only_what_is_dropped():
    g = Graph.chain(5, cost=3)
    sim = simulate(g, schedule.from_kept(g, ["x1", "x3", "x5"]))
    assert sim.recompute_cost == 6  # x2 and x4, once each


def test_gradient_aliasing_and_accumulation_follow_autograd():
    # y = x + f(x): add's backward hands its gradient buffer to both inputs (grad_alias);
    # f's backward makes a new buffer for x, which is then added in place into x's gradient.
    g = Graph()
    g.add_node("x", 4, 1, bwd_uses=["x"])
    g.add_node("f", 4, 1, ["x"], bwd_uses=["x"])
    g.add_node("y", 4, 1, ["x", "f"], bwd_uses=[], grad_alias=["x", "f"])
    sim = simulate(g, schedule.vanilla(g))
    # fwd x, f, y: 4, 8, 12 (f and y are read by nobody later and go). bwd y: x + seed = 8, no
    # new buffers. bwd f: x + shared buffer + f's new contribution to x = 12, then in place.
    assert sim.timeline == [4, 8, 12, 8, 12, 8]
    h = Graph.from_json(g.to_json())
    assert h["y"].grad_alias == ("x", "f")
    # without aliasing, add's backward allocates one buffer per input
    g2 = Graph()
    g2.add_node("x", 4, 1, bwd_uses=["x"])
    g2.add_node("f", 4, 1, ["x"], bwd_uses=["x"])
    g2.add_node("y", 4, 1, ["x", "f"], bwd_uses=[])
    assert simulate(g2, schedule.vanilla(g2)).timeline[3] == 16


def test_shared_gradients_are_copied_before_accumulation():
    # a feeds two adds that alias their gradients: the second contribution to a arrives while
    # a's gradient buffer is shared with b, so the sum needs a new buffer (autograd's rule)
    g = Graph()
    g.add_node("a", 2, 1, bwd_uses=[])
    g.add_node("b", 2, 1, ["a"], bwd_uses=[], grad_alias=["a"])
    g.add_node("c", 2, 1, ["a", "b"], bwd_uses=[], grad_alias=["a", "b"])
    sim = simulate(g, schedule.vanilla(g))
    # bwd c: seed 2, a and b share it. bwd b: its alias to a is shared with a's buffer -> new 2.
    assert sim.timeline[3:] == [2, 4, 2]


def test_values_without_gradient_get_none():
    # a dropout-like mask: y = x * mask; no gradient flows into the mask
    g = Graph()
    g.add_node("x", 4, 1, bwd_uses=[])
    g.add_node("mask", 4, 1, bwd_uses=[], requires_grad=False)
    g.add_node("y", 4, 1, ["x", "mask"], bwd_uses=["mask"])
    sim = simulate(g, schedule.vanilla(g))
    # bwd y: mask + seed + grad(x) = 12 (no gradient buffer for the mask); bwd mask: nothing
    assert sim.timeline[3:] == [12, 4, 4]
    assert Graph.from_json(g.to_json())["mask"].requires_grad is False


def batch_norm_like(saved_mem=1, grad_mem=4) -> Graph:
    """conv -> bn -> relu -> head, where bn's backward keeps only its statistics (1 of its 5)."""
    g = Graph()
    g.add_node("x", 4, 1, bwd_uses=[])
    g.add_node("bn", 5, 1, ["x"], bwd_uses=["x", "bn"], saved_mem=saved_mem, grad_mem=grad_mem)
    g.add_node("r", 4, 1, ["bn"], bwd_uses=["r"])
    g.add_node("h", 1, 1, ["r"], bwd_uses=["r"])
    return g


def test_a_value_shrinks_to_what_its_own_backward_keeps():
    sim = simulate(batch_norm_like(), schedule.vanilla(batch_norm_like()))
    # fwd x, bn, r: 4, 9, 13; then bn shrinks to 1 (9). fwd h: 10, h is read by nobody.
    # bwd h: 9 + seed 1 + grad(r) 4 = 14. bwd r: 9 + grad(r) + grad(bn) 4 = 17, then r goes.
    # bwd bn: x 4 + bn 1 + grad(bn) 4 + grad(x) 4 = 13. bwd x: its gradient only.
    assert sim.timeline == [4, 9, 13, 10, 14, 17, 13, 4]
    whole = simulate(batch_norm_like(None, None), schedule.vanilla(batch_norm_like(None, None)))
    assert whole.timeline == [4, 9, 13, 14, 18, 22, 18, 4]


def test_a_recomputed_value_shrinks_right_after_its_recomputation():
    g = batch_norm_like()
    steps = [("fwd", "x"), ("fwd", "bn"), ("fwd", "r"), ("free", "bn"), ("fwd", "h"), ("bwd", "h"),
             ("bwd", "r"), ("fwd", "bn"), ("bwd", "bn"), ("bwd", "x")]
    sim = simulate(g, steps)
    # the recomputation allocates all of bn (x 4 + grad(bn) 4 + bn 5 = 13), then keeps 1 of it
    assert sim.timeline[7:] == [13, 13, 4]
    assert sim.recompute_cost == 1


@settings(max_examples=60, deadline=None)
@given(dags(max_nodes=8), st.data())
def test_saved_mem_only_lowers_the_peak(g, data):
    """Keeping a part of a value for its own backward never costs more than keeping all of it,
    and keeping all of it (saved_mem = mem) is the default."""
    parts = Graph(name="parts")
    full = Graph(name="full")
    for v in g.order:
        n = g[v]
        uses = tuple(dict.fromkeys((*n.inputs, v)))
        part = data.draw(st.integers(0, int(n.mem)))
        parts.add_node(v, n.mem, n.cost, n.inputs, bwd_uses=uses, saved_mem=part)
        full.add_node(v, n.mem, n.cost, n.inputs, bwd_uses=uses, saved_mem=n.mem)
    kept = [v for v in g.order if data.draw(st.booleans())]
    steps = schedule.from_kept(g, kept)
    assert simulate(parts, steps).peak <= simulate(full, steps).peak == simulate(g, steps).peak


@pytest.mark.parametrize("readers,extra", [
    (("x1", "x4"), [0, 0, 0, 0, 10, 10, 10, 10, 10, 20]),  # tied embeddings: held from the first part to the last
    (("x1", "x2", "x4"), [0, 0, 0, 0, 10, 10, 10, 10, 30, 20]),  # a middle part: it, the sum so far and the new sum
    (("x2", "x3"), [0, 0, 0, 0, 0, 10, 10, 10, 20, 0]),
])
def test_a_weight_read_by_several_nodes_holds_its_gradient_parts_until_the_last(readers, extra):
    """``graph.shared_grads``: the first part is held from its reader's backward to the last
    reader's; a middle part is added out of place (part, sum so far and new sum at once); the
    last sum is the parameter's gradient, not counted. Exactly the plain timeline plus those
    bytes, step by step; a recomputation and a free during the backward hold them too."""
    g = Graph.chain(4)
    steps = [("fwd", "x1"), ("fwd", "x2"), ("fwd", "x3"), ("fwd", "x4"), ("bwd", "x4"), ("bwd", "x3"),
             ("free", "x1"), ("fwd", "x1"), ("bwd", "x2"), ("bwd", "x1")]
    plain = simulate(g, steps).timeline
    g.shared_grads = ((readers, 10.0),)
    assert simulate(g, steps).timeline == [a + b for a, b in zip(plain, extra)]
