"""Graph breaks under a byte budget: the graphs torch.compile makes one after another share it.

A graph break cuts one training step into graphs 0, 1, ... that run in turn: the forward of
graph 0, then of graph 1, ..., then their backwards in reverse. While graph j runs (forward and
backward), every earlier graph i < j holds what its forward left alive: its saved values and
its outputs (``CodePeak.after_forward``). So the step fits a byte budget B when, for every j,

    sum_{i<j} after_i + need_j <= B,

where ``need_j`` is graph j's own peak (``CodePeak.peak``) plus the input gradients it hands back
to graph j-1 (a loss graph returns the logits' gradient).

torch.compile compiles graph 0 and runs it before it has even seen graph 1, so graph 0 cannot
be planned for what follows. Hence (``backend.RematBackend``):

1. A graph that ends at a graph break (``ends_at_graph_break``) is planned *provisionally* at its
   floor (the solver's plan of least peak) and compiled as fx-generated code, cheap to make: the
   first step runs it, leaving the most room to the graphs after it.
2. A graph that ends the step is planned within what its predecessors leave: B - sum after_i.
   If its floor frees bytes for less recomputation per byte than the graphs before it pay on
   average (their forward's cost over their vanilla peaks: ``backend._price``), it takes the
   floor whatever the budget: a loss graph's log-softmax recomputes in a fused kernel for
   almost nothing, and the room it leaves lets graph 0 recompute less when re-planned (3.).
3. On its next call, when every graph after it is known, a provisional graph is planned again,
   for good, with the real compiler: within B - (what the graphs before it now hold), and with a
   *tail*: the bytes the graphs after it need while its forward's leftovers are still alive
   (``tail_bytes``). The tail is a node appended to the planning Graph (``with_tail``): read by
   nothing, freed at once, so the simulated peak counts ``after_i + tail`` at the end of the
   forward and nothing else changes. Stripping it from the schedule leaves the executable one.

Graphs are re-planned in call order (0 first), so each one's re-plan sees the final plans of
those before it; each reserved room for the floors of those after it, so every later re-plan
still fits. Recompiles (a new input shape) start a new chain: the graphs of one step are those
compiled one after another, each but the last ending at a graph break.

One graph can run several times a step: a block compiled once and called per layer, as dynamo
does when a loop over blocks breaks (FSDP2's per-block hooks break it at every block). Each call
holds its forward's leftovers until its backward, so the step needs ``step_peak`` over the calls
in order, which compiling cannot see. So can graphs that no graph break ends (a graph per
layer, the breaks in the hooks around them): each was compiled as a step of its own. The first
step's calls are recorded (``Recorder``: up to the first backward); where they need more than a
byte budget together, the graphs are planned again (``backend``): one graph run k times so that
its k - 1 earlier calls' leftovers and its own peak fit together; several graphs first each at
the plan that leaves the least after its forward, then in call order, as a chain is above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..graph import Graph

TAIL = "remat:after-this-graph"   # the planning node standing for the graphs that follow
COMPILED = "CompiledFunctionBackward"  # the grad_fn of a compiled graph's outputs
MAX_CALLS = 10_000  # graph calls recorded at most before a backward (``Recorder``)


def with_tail(graph: Graph, tail: float) -> Graph:
    """``graph`` plus a last forward node of ``tail`` bytes reading its sinks: no gradient, read by
    nothing, so it only adds ``tail`` to the memory at the end of the forward."""
    g = Graph(name=graph.name)
    g._nodes = dict(graph._nodes)
    g._invalidate()
    for attr in ("pinned", "shared_grads"):
        if hasattr(graph, attr):
            setattr(g, attr, getattr(graph, attr))
    g.add_node(TAIL, mem=float(tail), cost=0.0, inputs=graph.sinks, op="graphs after a graph break",
               bwd_uses=(), requires_grad=False)
    return g


def without_tail(steps: list) -> list:
    """A schedule planned on ``with_tail``'s graph, for the graph itself."""
    return [s for s in steps if s[1] != TAIL]


def ends_at_graph_break(gm: Any) -> bool:
    """Whether dynamo made this graph because of a graph break (more graphs of the step follow)."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    return bool(getattr(reason, "graph_break", False))


@dataclass
class Slot:
    """One graph of a chain: what its current plan leaves alive and needs (bytes)."""

    index: int
    breaks: bool                        # ends at a graph break: more graphs follow
    after: float = 0.0                  # saved values + outputs held once its forward returns
    need: float = 0.0                   # its own peak + the input gradients it returns
    provisional: bool = False           # planned at its floor, to be planned again when the rest is known
    planned: Any = None                 # partitioner.Planned of the current plan
    replans: list[str] = field(default_factory=list)  # what happened when it was planned again
    calls: int = 1                      # times it ran in the first step (``Recorder``)
    first_after: float = 0.0            # ``after`` of its plan before a step at its floor (``backend``)


def held_before(chain: list[Slot], i: int) -> float:
    """Bytes the graphs before graph ``i`` hold while it runs."""
    return sum(s.after for s in chain[:i])


def tail_bytes(chain: list[Slot], i: int) -> float:
    """The most the graphs after graph ``i`` need on top of what graph ``i`` holds: for each later
    graph j, what the graphs between hold plus j's own need."""
    tail, between = 0.0, 0.0
    for s in chain[i + 1:]:
        tail = max(tail, between + s.need)
        between += s.after
    return tail


def step_peak(calls: list[Slot]) -> float:
    """The most a step needs, its graphs' calls in order (a graph run k times appears k times):
    while each runs, every earlier call holds its forward's leftovers."""
    held, peak = 0.0, 0.0
    for s in calls:
        peak = max(peak, held + s.need)
        held += s.after
    return peak


class Recorder:
    """The graphs' calls of a training step, in order: recorded until the first backward reaches
    a recorded call's outputs, then handed to ``done``. ``eager_inputs``: a call's input came
    from autograd outside the compiled graphs (eager code before it, or between graphs), whose
    memory no plan sees."""

    def __init__(self, done: Callable[[list[Slot]], None]) -> None:
        self.calls: list[Slot] = []
        self.finished = False
        self.eager_inputs = False
        self._done = done

    def called(self, slot: Slot, outputs: Any, inputs: Any = ()) -> None:
        if self.finished:
            return
        outs = [o for o in (outputs if isinstance(outputs, (list, tuple)) else (outputs,))
                if getattr(o, "requires_grad", False) and getattr(o, "grad_fn", None) is not None]
        if not outs:  # an inference call (no_grad, eval): not part of a training step
            return
        if len(self.calls) >= MAX_CALLS:  # no backward reached the outputs of so many calls: stop looking
            self.finished = True
            return
        self.calls.append(slot)
        self.eager_inputs = self.eager_inputs or any(
            getattr(a, "grad_fn", None) is not None and type(a.grad_fn).__name__ != COMPILED for a in inputs)
        for out in outs:  # (whichever the loss reads: the first gradient to arrive ends the step's forward)
            out.register_hook(self._backward)

    def _backward(self, grad: Any) -> None:
        if not self.finished:
            self.finished = True
            self._done(list(self.calls))


class Swappable:
    """The callable dynamo runs for one graph: its code, swapped (once) for code planned again
    (``replan``, which returns None while it cannot plan yet); each call and its outputs told to
    ``record``."""

    def __init__(self, fn: Callable, replan: Callable[[list], Callable | None] | None = None,
                 slot: Slot | None = None, record: Callable[[Slot, Any, Any], None] | None = None) -> None:
        self.fn = fn
        self._replan = replan
        self.slot, self.record = slot, record

    def replan_with(self, replan: Callable[[list], Callable | None]) -> None:
        self._replan = replan

    def __call__(self, *args: Any) -> Any:
        if self._replan is not None:
            fn = self._replan(list(args))
            if fn is not None:
                self.fn, self._replan = fn, None
        out = self.fn(*args)
        if self.record is not None:
            self.record(self.slot, out, args)
        return out
