"""``remat.heap.frozen``: planning freezes the heap alive when it starts, and gives it back."""

import gc
import weakref

import pytest

from remat import heap


class Node:
    me: object = None


@pytest.fixture
def thawed():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_frozen_freezes_what_is_alive_and_thaws_it_after(thawed):
    assert gc.get_freeze_count() == 0
    with heap.frozen():
        assert gc.get_freeze_count() > 0
        cycle = Node()
        cycle.me = cycle  # garbage made while planning is still collected
        ref = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert ref() is None
    assert gc.get_freeze_count() == 0


def test_frozen_leaves_a_caller_s_own_freeze_alone(thawed, monkeypatch):
    """Neither frozen again nor thawed by remat (the count itself may fall meanwhile: a frozen
    object that dies leaves the permanent generation, as one did under pytest-xdist)."""
    gc.freeze()
    assert gc.get_freeze_count() > 0
    calls = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc, "unfreeze", lambda: calls.append("unfreeze"))
    with heap.frozen():
        pass
    assert calls == []


def test_frozen_thaws_after_an_error(thawed):
    with pytest.raises(ValueError), heap.frozen():
        raise ValueError
    assert gc.get_freeze_count() == 0


def test_planning_runs_with_the_heap_frozen(thawed, monkeypatch):
    import remat
    from remat import judge
    from strategies import residual

    seen = []
    answer = judge.answer
    monkeypatch.setattr(judge, "answer", lambda *a, **k: seen.append(gc.get_freeze_count()) or answer(*a, **k))
    remat.solve(residual(6), "60%", solver="selective")
    assert seen and seen[0] > 0 and gc.get_freeze_count() == 0
