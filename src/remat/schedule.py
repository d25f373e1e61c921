"""Lowering: turn what a solver decided (stages, or a kept set) into the step schedule.

Solvers decide what to keep; this one shared step derives what to compute and when, so every
solver's answer is executed and simulated the same way (Checkmate's split, STYLE.md §4).

- ``vanilla``: forward everything, backward in reverse topological order.
- ``from_stages``: the canonical strategy of seed 000 §3. After stage i's forward, V_i \\ ∂(L_i)
  is dropped; in the backward, stage i is recomputed from the cache and back-propagated. One
  refinement over the paper: the last stage V_k is not dropped and recomputed, since its
  backward follows its forward at once (so the schedule recomputes eq. (1) minus T(V_k)).
- ``from_kept``: forward everything, keep only ``kept`` (plus what the forward still needs),
  and before each backward step recompute the missing values it reads from what is in memory.
- ``executable``: a solver's own schedule in the form the runtime executes step for step (one
  forward pass, then autograd's backward order), or None when its backward order is not
  autograd's.

Frees beyond those the strategy implies are left to the simulator's liveness analysis.
"""

from __future__ import annotations

from typing import Iterable

from .graph import Graph
from .lowerset import Poset
from .plan import Step


def vanilla(graph: Graph) -> list[Step]:
    order = graph.order
    return [("fwd", v) for v in order] + [("bwd", v) for v in reversed(order)]


def from_stages(graph: Graph, stages: list[list[str]]) -> list[Step]:
    """Canonical-strategy schedule for stages V_1..V_k (each a list of ids)."""
    p = Poset.of(graph)
    pos = p.pos
    stages = [sorted(s, key=pos.__getitem__) for s in stages]
    lowers, acc = [], 0
    for s in stages:
        acc |= p.mask(s)
        lowers.append(acc)
    dropped = [set(s) - set(p.ids(p.boundary(lo))) for s, lo in zip(stages, lowers)]
    steps: list[Step] = []
    last = len(stages) - 1
    for i, s in enumerate(stages):
        steps += [("fwd", v) for v in s]
        if i < last:
            steps += [("free", v) for v in s if v in dropped[i]]
    for i in range(last, -1, -1):
        if i < last:
            steps += [("fwd", v) for v in stages[i] if v in dropped[i]]
        steps += [("bwd", v) for v in reversed(stages[i])]
    return steps


def from_kept(graph: Graph, kept: Iterable[str]) -> list[Step]:
    """Schedule that caches ``kept`` in the forward and recomputes the rest on demand."""
    kept = set(kept)
    order = graph.order
    pos = {v: i for i, v in enumerate(order)}
    last_fwd_reader = {v: v for v in order}
    for v in order:
        for u in graph[v].inputs:
            last_fwd_reader[u] = v
    frees_after: dict[str, list[str]] = {}
    for v in order:
        if v not in kept:
            frees_after.setdefault(last_fwd_reader[v], []).append(v)

    steps: list[Step] = []
    for v in order:
        steps.append(("fwd", v))
        steps += [("free", u) for u in frees_after.get(v, ())]
    live = set(kept)
    for v in reversed(order):
        missing = _closure_missing(graph, graph[v].saved, live)
        for u in sorted(missing, key=pos.__getitem__):
            steps.append(("fwd", u))
        live |= missing
        steps.append(("bwd", v))
    return steps


def _closure_missing(graph: Graph, needed: Iterable[str], live: set[str]) -> set[str]:
    """Values to recompute so that all of ``needed`` are in memory: missing ones and their
    missing ancestors, stopping at values already live."""
    out: set[str] = set()
    stack = [u for u in needed if u not in live]
    while stack:
        u = stack.pop()
        if u in out:
            continue
        out.add(u)
        stack += [w for w in graph[u].inputs if w not in live and w not in out]
    return out


def triggers(graph: Graph, v: str) -> bool:
    """Whether the runtime gets control at v's backward step: autograd runs a node for v (it
    requires grad) and unpacks a value v saved. Recomputations are done at such steps only."""
    return graph[v].requires_grad and bool(graph[v].saved)


def executable(graph: Graph, steps: list[Step]) -> list[Step] | None:
    """``steps`` as the runtime runs them, or None if it cannot (backward order not autograd's).

    The runtime's forward is the model's own pass (each value once, in order), and autograd
    back-propagates in reverse creation order, taking control only at steps that ``triggers``.
    So: the forward part (up to where the last value is first computed, or the first backward
    step if that comes earlier) becomes one pass in order, keeping what the schedule reads again
    later (a value the schedule first computes after a backward step is computed in that pass
    too, and its later computation is a recomputation); a
    recomputation before a backward step that does not trigger moves to the next one that does;
    explicit frees go (liveness frees at the last read), and so do recomputations that nothing
    reads before the value is computed again. Recompute cost never grows; the peak can move
    either way (a moved recomputation misses the memory a backward step frees or allocates), so
    callers simulate the result.
    """
    order = graph.order
    seen: set[str] = set()
    end = len(steps)  # the forward part ends where the last value is first computed
    for i, (kind, v) in enumerate(steps):
        if kind == "bwd" or len(seen) == len(order):
            end = i
            break
        if kind == "fwd":
            seen.add(v)
    tail = steps[end:]
    if [v for kind, v in tail if kind == "bwd"] != list(reversed(order)):
        return None
    out: list[Step] = [("fwd", v) for v in order]
    pending: list[Step] = []
    for kind, v in _read_recomputations(graph, tail):
        if kind == "fwd":
            pending.append((kind, v))
        elif kind == "bwd":
            if triggers(graph, v):
                out += pending
                pending = []
            out.append((kind, v))
    return out


def _read_recomputations(graph: Graph, tail: list[Step]) -> list[Step]:
    """``tail`` without its frees and without the ``fwd`` steps whose value nothing reads
    before it is computed again (a walk from the end, tracking the values read later)."""
    needed: set[str] = set()
    kept: list[Step] = []
    for kind, v in reversed(tail):
        if kind == "bwd":
            needed.update(graph[v].saved)
        elif kind == "fwd" and v in needed:
            needed.discard(v)
            needed.update(graph[v].inputs)
        else:
            continue
        kept.append((kind, v))
    return kept[::-1]
