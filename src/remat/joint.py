"""The schedule problem of seed 004 §2 and its bridge to the training problem.

Seed 004 plans a *node sequence* σ computing one final node of an arbitrary DAG (nodes may
repeat), with peak memory M(σ) through the sets U_i. A training step is such a DAG once the
backward pass is written out as nodes: ``joint_graph`` builds that forward+backward graph,
a schedule-problem solver (twremat, greedy, none) sequences it, and ``joint_to_steps`` turns
the sequence back into remat's training steps, which ``remat.simulate`` then judges.

Also here, shared by every schedule-problem solver: ``resolve_final`` (which node is f),
``ancestors`` (the nodes f needs), ``sequence_plan`` (wrap a sequence into a Plan whose peak
is M(σ)) and ``training_plan`` (solve the training problem through the joint graph).

Tested in tests/test_joint.py: the joint graph of hand-sized graphs edge by edge, and random
DAGs (hypothesis) whose converted schedules pass the training simulator.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable, Iterable

from .errors import GraphError, InputError
from .graph import Graph
from .plan import Plan, Step
from .simulate import simulate_sequence, simulate_training

BWD_PREFIX = "b:"
END = "end"

SequenceSolver = Callable[[Graph, str], tuple[list[str], dict]]


def joint_graph(graph: Graph, autograd_order: bool = False) -> tuple[Graph, str]:
    """The joint forward+backward graph of a training step, and its final node ``"end"``.

    Forward nodes keep their ids, mem, cost and inputs. For each forward node v, ``"b:" + v``
    (op ``"bwd"``) outputs the gradients w.r.t. v's inputs: mem = sum of their mem, cost =
    2 * cost(v), inputs = ``graph[v].saved`` + ``"b:" + w`` for each consumer w of v (v's
    gradient arrives from its consumers' backward nodes; a sink's gradient is the seed).
    ``"end"`` (mem 0, cost 0) reads every backward node that nothing consumes, i.e. b:v for
    each forward source v.

    ``autograd_order``: b:v also reads the backward node of the value created right after v, so
    every sequence back-propagates in reverse creation order, the only order the runtime's
    autograd follows (``schedule.executable``); without it a sequence whose backward runs in
    another order can only be run as its kept set.
    """
    graph.validate()
    clash = [v for v in graph.order if v == END or v.startswith(BWD_PREFIX)]
    if clash:
        raise GraphError(f"node id {clash[0]!r} collides with the joint graph's names "
                         f"({END!r} and the {BWD_PREFIX!r} prefix): rename it")
    j = Graph(name=f"{graph.name}:joint")
    nxt = dict(zip(graph.order, graph.order[1:]))
    for v in graph.order:
        n = graph[v]
        j.add_node(v, n.mem, n.cost, n.inputs, op=n.op, bwd_uses=n.bwd_uses)
    for v in reversed(graph.order):
        n = graph[v]
        grads_in = [BWD_PREFIX + w for w in graph.succ[v]]
        after = nxt.get(v)
        if autograd_order and after is not None and after not in graph.succ[v]:
            grads_in.append(BWD_PREFIX + after)
        j.add_node(BWD_PREFIX + v, graph.mem(n.inputs), 2 * n.cost, [*n.saved, *grads_in], op="bwd")
    heads = [BWD_PREFIX + v for v in graph.order if not graph[v].inputs]
    j.add_node(END, 0, 0, heads, op="end")
    return j, END


def joint_to_steps(sequence: Iterable[str], graph: Graph | None = None) -> list[Step]:
    """Training steps of a joint-graph node sequence: v -> ("fwd", v), "b:v" -> ("bwd", v).

    ``"end"`` is dropped. A training step back-propagates each node once, so when the sequence
    evaluates a ``b:`` node again (a schedule-problem solver may rematerialize a gradient), only
    its first evaluation is kept: the gradient then stays in memory until it is consumed, which
    the simulator counts. The forward steps that fed a dropped repeat stay (wasted recompute).
    With ``graph``, a forward value the sequence never computes (nobody reads it, like a loss
    whose backward does not need it) is computed as soon as its inputs first are: autograd
    only back-propagates through what the forward pass ran. A value the runtime never recomputes
    (``graph.pinned``: generator states, draws it cannot replay) is computed once and held until
    its last use: the sequence's later evaluations of it are dropped.
    """
    steps = _convert(sequence)
    return steps if graph is None else _compute_every_value(graph, _once_pinned(graph, steps))


def _once_pinned(graph: Graph, steps: list[Step]) -> list[Step]:
    """``steps`` without the recomputations of pinned values (the runtime keeps them instead)."""
    fixed = frozenset(getattr(graph, "pinned", ()) or ())
    if not fixed:
        return steps
    seen: set[str] = set()
    out: list[Step] = []
    for kind, v in steps:
        if kind == "fwd" and v in fixed:
            if v in seen:
                continue
            seen.add(v)
        out.append((kind, v))
    return out


def _compute_every_value(graph: Graph, steps: list[Step]) -> list[Step]:
    computed = {v for kind, v in steps if kind == "fwd"}
    waiting = [v for v in graph.order if v not in computed]  # topological: an input before its consumer
    if not waiting:
        return steps
    pos = {v: i for i, v in enumerate(graph.order)}
    have: set[str] = set()
    out: list[Step] = []

    def compute(vs: Iterable[str]) -> None:
        for v in vs:
            out.append(("fwd", v))
            have.add(v)

    def place_ready() -> None:
        nonlocal waiting
        ready = []
        for v in waiting:
            if all(u in have or u in ready for u in graph[v].inputs):
                ready.append(v)
        if ready:
            compute(ready)
            waiting = [v for v in waiting if v not in have]

    place_ready()
    for kind, v in steps:
        if kind == "bwd" and v not in have:
            # a value nobody reads back-propagated before the sequence computes its inputs (a loss whose
            # backward needs nothing: TWRemat starts the backward with it): computed here, with its inputs
            compute(sorted(_uncomputed_ancestors(graph, v, have), key=pos.__getitem__))
            waiting = [u for u in waiting if u not in have]
        out.append((kind, v))
        if kind == "fwd":
            have.add(v)
            place_ready()
    return out


def _uncomputed_ancestors(graph: Graph, v: str, have: set[str]) -> set[str]:
    """``v`` and its ancestors not in ``have``."""
    todo, found = [v], set()
    while todo:
        u = todo.pop()
        if u in have or u in found:
            continue
        found.add(u)
        todo += graph[u].inputs
    return found


def _convert(sequence: Iterable[str]) -> list[Step]:
    steps: list[Step] = []
    done: set[str] = set()
    for v in sequence:
        if v == END:
            continue
        if v.startswith(BWD_PREFIX):
            if v not in done:
                done.add(v)
                steps.append(("bwd", v[len(BWD_PREFIX):]))
        else:
            steps.append(("fwd", v))
    return steps


# ---- shared by the schedule-problem solvers ----------------------------------------------------
def resolve_final(graph: Graph, final: str | None) -> str:
    """The final node f: ``final`` if given, else the last sink (as ``simulate_sequence``)."""
    if final is None:
        return graph.sinks[-1]
    if final not in graph:
        raise InputError(f"final node {final!r} is not in graph {graph.name!r}: pass final=ID of one of its nodes")
    return final


def ancestors(graph: Graph, targets: Iterable[str]) -> set[str]:
    """The targets and every node they need (seed 004 assumes all nodes are needed for f)."""
    out: set[str] = set()
    stack = list(targets)
    while stack:
        v = stack.pop()
        if v not in out:
            out.add(v)
            stack.extend(graph[v].inputs)
    return out


def topological(graph: Graph, nodes: Iterable[str]) -> list[str]:
    """``nodes`` in the graph's topological order (NoRemat's order)."""
    keep = set(nodes)
    return [v for v in graph.order if v in keep]


def within(value: float, budget: float | None) -> bool:
    return budget is None or value <= budget * (1 + 1e-9) + 1e-12


def sequence_plan(graph: Graph, seq: list[str], final: str, solver: str, budget: float | None,
                  started: float, **stats) -> Plan:
    """Plan of the schedule problem: peak = M(σ) (seed 004 §2), recompute = repeated evaluations."""
    sim = simulate_sequence(graph, seq, final)
    return Plan(
        solver=solver, budget=budget, feasible=within(sim.peak, budget), schedule=list(seq),
        peak=sim.peak, recompute_cost=sim.recompute_cost,
        solve_seconds=time.perf_counter() - started, problem="schedule",
        stats={"final": final, "length": graph.cost(seq), "steps": len(seq), **stats},
    )


def training_plan(graph: Graph, budget: float | None, solver: str, sequencer: SequenceSolver,
                  started: float, autograd_order: bool = True) -> Plan:
    """Training problem via the joint graph: sequence it, convert, simulate (plan.peak).
    ``autograd_order``: the joint graph makes the sequence back-propagate as autograd does (``joint_graph``)."""
    joint, end = joint_graph(graph, autograd_order=autograd_order)
    seq, stats = sequencer(joint, end)
    steps = joint_to_steps(seq, graph)
    sim = simulate_training(graph, steps)
    joint_sim = simulate_sequence(joint, seq, end)
    return Plan(
        solver=solver, budget=budget, feasible=within(sim.peak, budget), schedule=steps,
        kept=kept_of_steps(graph, steps), peak=sim.peak, recompute_cost=sim.recompute_cost,
        solve_seconds=time.perf_counter() - started, problem="training",
        stats={"simulated_peak": sim.peak, "joint_peak": joint_sim.peak, "joint_steps": len(seq),
               "joint_nodes": len(joint), "autograd_order": autograd_order, **stats},
    )


def kept_of_steps(graph: Graph, steps: list[Step]) -> list[str]:
    """The values a schedule computes once (never recomputed): a plan's kept set."""
    computed = Counter(u for k, u in steps if k == "fwd")
    return [v for v in graph.order if computed[v] == 1]
