"""The one memory and time accounting every solver is judged by.

``simulate(graph, plan)`` walks the step schedule with liveness analysis (seed 002 §3): a forward
value lives from its ``fwd`` step until its last read, where a read is a later ``fwd`` that takes
it as input or a ``bwd`` step that saved it (``Node.saved``). An explicit ``free`` ends a value
early. Recompute cost is the cost of every ``fwd`` of a node computed before.

Gradients follow autograd's engine: ``bwd v`` first produces one contribution per input (a new
buffer of the input's size, or, for inputs in ``Node.grad_alias``, v's own gradient buffer),
then releases v's gradient, then adds each contribution into the input's gradient: the first
contribution becomes that gradient; a later one is added in place into an unshared buffer, else
into the contribution if that is unshared, else into a new buffer. A buffer is freed when no
gradient refers to it. Memory is counted during each step: what is live plus what the step
allocates. Nodes with ``requires_grad=False`` get no gradient at all. A value whose own
backward keeps only part of it (``Node.saved_mem``) shrinks to that part after its last other read.
Gradient buffers have the size of the differentiable part of a value (``Node.grad_size``).

A weight the graph's values read in several places (tied embeddings, a layer called in a loop)
gets its gradient in parts, one from the backward of each node that reads it
(``graph.shared_grads``: the readers and the weight's bytes, set by ``compiled.jointgraph``).
The weight itself is not a value of the graph, and its summed gradient is the step's result
(the parameter's ``.grad``, not counted), but the parts are not: the first is held from its
reader's backward until the last reader's, and each later one is added to it out of place as it
comes (the part, the sum so far and the new sum live at once; the last sum is the result).

A schedule that reads a value not in memory, back-propagates a node twice, before all its
consumers or before ever computing it, or never back-propagates a node, is rejected with a
ScheduleError naming the step.

For the schedule problem of seed 004 (``plan.problem == "schedule"``) the peak is M(σ) of §2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .errors import ScheduleError
from .graph import Graph, Node
from .plan import Plan, Step


@dataclass
class Simulation:
    peak: float
    recompute_cost: float
    timeline: list[float] = field(default_factory=list)  # memory during each step
    peak_step: int = 0

    def to_json(self) -> dict:
        return {"peak": self.peak, "recompute_cost": self.recompute_cost, "peak_step": self.peak_step}


def simulate(graph: Graph, plan: Plan | list) -> Simulation:
    """Peak memory, recompute cost and memory timeline of a plan's schedule."""
    if isinstance(plan, Plan):
        if not plan.feasible and not plan.schedule:
            raise ScheduleError(f"plan of {plan.solver} is infeasible and has no schedule: {plan.message}; "
                                f"check plan.feasible before simulating it")
        if plan.problem == "schedule":
            return simulate_sequence(graph, plan.schedule, plan.stats.get("final"))
        steps = plan.schedule
    else:
        steps = plan
    return simulate_training(graph, steps)


def _last_reads(graph: Graph, steps: list[Step]) -> tuple[list[list[str]], list[list[str]]]:
    """For each step, the forward values whose live interval ends right after it, and those that
    shrink to ``Node.self_kept`` after it (their last read before their own backward step, when
    that backward keeps only part of them)."""
    ends: list[list[str]] = [[] for _ in steps]
    shrinks: list[list[str]] = [[] for _ in steps]
    current: dict[str, int] = {}  # value -> index of the step that ends its interval so far
    other: dict[str, int] = {}    # value -> index of its last read other than its own backward

    def close(v: str) -> None:
        if v in current:
            last, before = current.pop(v), other.pop(v)
            if last != before and steps[last] == ("bwd", v) and graph[v].self_kept < graph[v].mem:
                shrinks[before].append(v)
            ends[last].append(v)

    for k, (kind, v) in enumerate(steps):
        if kind == "fwd":
            for u in graph[v].inputs:
                if u in current:
                    current[u] = other[u] = k
            close(v)
            current[v] = other[v] = k
        elif kind == "bwd":
            for u in graph[v].saved:
                if u in current:
                    current[u] = k
                    if u != v:
                        other[u] = k
        elif kind == "free":
            close(v)
    for v in list(current):
        close(v)
    return ends, shrinks


def _check_steps(graph: Graph, steps: list[Step]) -> None:
    for k, step in enumerate(steps):
        if not (isinstance(step, (tuple, list)) and len(step) == 2):
            raise ScheduleError(f"step {k} is {step!r}: a step is (kind, node id)")
        kind, v = step
        if kind not in ("fwd", "bwd", "free"):
            raise ScheduleError(f"step {k} has unknown kind {kind!r}: use fwd, bwd or free")
        if v not in graph:
            raise ScheduleError(f"step {k} ({kind} {v}) names an unknown node")


class _Grads:
    """Gradient buffers with reference counts: which node's gradient uses which buffer."""

    def __init__(self) -> None:
        self.of: dict[str, int] = {}        # node -> buffer id
        self.size: dict[int, float] = {}
        self.refs: dict[int, int] = {}
        self.mem = 0.0
        self._next = 0

    def new(self, size: float) -> int:
        self._next += 1
        self.size[self._next], self.refs[self._next] = size, 1
        self.mem += size
        return self._next

    def share(self, buf: int) -> int:
        self.refs[buf] += 1
        return buf

    def drop(self, buf: int) -> None:
        self.refs[buf] -= 1
        if not self.refs[buf]:
            self.mem -= self.size.pop(buf)
            del self.refs[buf]

    def accumulate(self, u: str, contribution: int, size: float) -> float:
        """Add a contribution into u's gradient; returns the most gradient memory held meanwhile."""
        held = self.mem
        old = self.of.get(u)
        if old is None:
            self.of[u] = contribution
        elif self.refs[old] == 1:          # in place into the unshared gradient
            self.drop(contribution)
        elif self.refs[contribution] == 1:  # into the unshared contribution
            self.of[u] = contribution
            self.drop(old)
        else:                               # both shared: out of place
            self.of[u] = self.new(size)
            held = self.mem
            self.drop(old)
            self.drop(contribution)
        return held


def _backward(nodes: Mapping[str, Node], node: Node, grads: _Grads) -> float:
    """One backward step's gradient traffic; returns the most gradient memory held during it."""
    if node.id not in grads.of:  # a sink: its gradient is the seed of the backward pass
        grads.of[node.id] = grads.new(node.grad_size)
    mine = grads.of.pop(node.id)
    targets = [nodes[u] for u in node.inputs if nodes[u].requires_grad]
    contributions = [grads.share(mine) if u.id in node.grad_alias else grads.new(u.grad_size) for u in targets]
    held = grads.mem
    grads.drop(mine)
    for u, c in zip(targets, contributions):
        held = max(held, grads.accumulate(u.id, c, u.grad_size))
    return held


def simulate_training(graph: Graph, steps: list[Step]) -> Simulation:
    """Peak, recompute cost and timeline of a training schedule (module docstring). Malformed
    steps are named before any other error, as a check of every step up front would (it runs
    only when the walk fails: a tenth of a planning call's simulations)."""
    try:
        return _simulate_training(graph, steps)
    except (ScheduleError, KeyError, TypeError, ValueError):
        _check_steps(graph, steps)
        raise


class _SharedGrads:
    """The parts of the gradients of weights read by several nodes (module docstring)."""

    def __init__(self, shared: tuple) -> None:
        self.arrivals: dict[str, list[int]] = {}
        for i, (readers, _) in enumerate(shared):
            for r in readers:
                self.arrivals.setdefault(r, []).append(i)
        self.readers = [len(set(readers)) for readers, _ in shared]
        self.size = [float(size) for _, size in shared]
        self.seen = [0] * len(shared)
        self.held = 0.0  # the sums so far, held between their parts

    def backward(self, v: str) -> float:
        """Bytes ``bwd v`` allocates for parts on top of ``held`` while it runs; updates ``held``."""
        extra = 0.0
        for i in self.arrivals.get(v, ()):
            self.seen[i] += 1
            size, j, k = self.size[i], self.seen[i], self.readers[i]
            if j == 1:  # the first part: held until the next comes
                extra += size
                self.held += size
            elif j < k:  # a part and the new sum, beside the sum so far
                extra += 2 * size
            else:  # the last part beside the sum so far; the new sum is the result
                extra += size
                self.held -= size
        return extra


def _simulate_training(graph: Graph, steps: list[Step]) -> Simulation:
    nodes = graph.nodes
    ends, shrinks = _last_reads(graph, steps)
    shared = _SharedGrads(graph.shared_grads) if getattr(graph, "shared_grads", None) else None
    live: dict[str, float] = {}   # forward values in memory
    grads = _Grads()
    fwd_mem = 0.0
    computed: set[str] = set()
    done_bwd: set[str] = set()
    pending = {v: len(s) for v, s in graph.succ.items()}  # consumers not yet back-propagated
    peak, peak_step, recompute = 0.0, 0, 0.0
    timeline: list[float] = []

    def missing(k: int, kind: str, v: str, reads: tuple[str, ...]) -> None:
        u = next(u for u in reads if u not in live)
        raise ScheduleError(f"step {k} ({kind} {v}) reads {u!r}, which is not in memory")

    for k, (kind, v) in enumerate(steps):
        node = nodes[v]
        if kind == "fwd":
            for u in node.inputs:
                if u not in live:
                    missing(k, kind, v, node.inputs)
            if v in computed:
                recompute += node.cost
            computed.add(v)
            if v not in live:
                live[v] = node.mem
                fwd_mem += node.mem
            during = fwd_mem + grads.mem + (shared.held if shared is not None else 0.0)
        elif kind == "bwd":
            if v in done_bwd:
                raise ScheduleError(f"step {k} back-propagates {v!r} a second time")
            if pending[v]:
                raise ScheduleError(f"step {k} back-propagates {v!r} before all its consumers")
            if v not in computed:  # autograd only knows the ops the forward pass ran
                raise ScheduleError(f"step {k} back-propagates {v!r}, which was never computed")
            for u in node.saved:
                if u not in live:
                    missing(k, kind, v, node.saved)
            for u in node.inputs:
                pending[u] -= 1
            done_bwd.add(v)
            held = shared.held if shared is not None else 0.0
            parts = shared.backward(v) if shared is not None else 0.0
            if not node.requires_grad:
                during = fwd_mem + grads.mem + held + parts
            else:
                during = _backward(nodes, node, grads) + fwd_mem + held + parts
        elif kind == "free":
            during = fwd_mem + grads.mem + (shared.held if shared is not None else 0.0)
        else:
            raise ValueError(kind)  # named by ``_check_steps``
        for u in shrinks[k]:
            if u in live:
                kept = nodes[u].self_kept
                fwd_mem -= live[u] - kept
                live[u] = kept
        for u in ends[k]:
            fwd_mem -= live.pop(u, 0.0)
        timeline.append(during)
        if during > peak:
            peak, peak_step = during, k
    if len(done_bwd) < len(nodes):
        missing_bwd = [v for v in graph.order if v not in done_bwd]
        raise ScheduleError(f"schedule never back-propagates {missing_bwd[:5]}{'...' if len(missing_bwd) > 5 else ''}")
    return Simulation(peak=peak, recompute_cost=recompute, timeline=timeline, peak_step=peak_step)


def simulate_sequence(graph: Graph, seq: list[str], final: str | None = None) -> Simulation:
    """M(σ) of seed 004 §2 for a node sequence computing ``final`` (default: the last sink).

    U_i, the values kept after step i, holds σ_i and every earlier value that a later step
    reads before it is computed again (or ``final``); the memory of step i is M(U_{i-1} ∪ {σ_i}).
    """
    final = final or graph.sinks[-1]
    ends, _ = _last_reads(graph, [("fwd", v) for v in seq])
    live: dict[str, float] = {}
    mem = peak = recompute = 0.0
    peak_step = 0
    timeline: list[float] = []
    seen: set[str] = set()
    for k, v in enumerate(seq):
        for u in graph[v].inputs:
            if u not in live:
                raise ScheduleError(f"step {k} ({v}) reads {u!r}, which is not in memory")
        if v in seen:
            recompute += graph[v].cost
        seen.add(v)
        if v not in live:
            live[v] = graph[v].mem
            mem += graph[v].mem
        timeline.append(mem)
        if mem > peak:
            peak, peak_step = mem, k
        for u in ends[k]:
            if u != final or k == len(seq) - 1:
                mem -= live.pop(u, 0.0)
    if final not in seen:
        raise ScheduleError(f"sequence never computes the final node {final!r}")
    return Simulation(peak=peak, recompute_cost=recompute, timeline=timeline, peak_step=peak_step)
