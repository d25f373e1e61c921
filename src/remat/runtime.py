"""Plan -> executable module: run a training step under a plan's schedule, same gradients.

The runtime never decides what to keep. It executes ``executed_schedule(graph, plan)``: the
plan's own schedule in the form ``remat.schedule.executable`` gives it (a MILP or TWRemat
schedule, where a value may be recomputed, freed and recomputed again), or its kept set lowered
by ``remat.schedule.from_kept`` (seed 000 §3's "cache the kept set, recompute the rest in the
backward", with seed 002's liveness analysis), whichever simulates to less memory. The
prediction to compare a measurement with is ``predict(graph, plan)`` = ``remat.simulate`` of it.

How one step runs:

- Forward: the captured aten program is interpreted on the model's own parameters and buffers
  with autograd on (so gradients accumulate into ``model.parameters()`` and an optimizer built on
  them keeps working). ``saved_tensors_hooks`` turn every activation autograd wants to save into
  a handle; the runtime alone holds activations: a kept value from its forward until its last
  planned backward read, anything else only until its last forward reader.
- Backward: when autograd unpacks the first handle of a node, the schedule's recomputations
  before that node's backward step run under ``no_grad`` (``Instances.segments``). Each copy of
  a value is dropped after its last planned read before the next copy (reference counts per
  copy, taken from the schedule), the liveness the simulator assumes. Ops that draw random
  numbers are replayed with the RNG state of their first run (dropout masks identical); ops that
  update buffers (BatchNorm running statistics) get throw-away copies of them when recomputed,
  so the statistics move once per step; buffer write-backs run only in the forward.
- If autograd ever asks for a value in an order the schedule did not foresee (a second
  ``backward(retain_graph=True)``, say), it is recomputed on demand from what is in memory:
  correctness never depends on the order, only the memory does (counted in ``stats``).

Tested against eager PyTorch (tests/test_runtime.py): outputs and parameter gradients
bit-identical (``torch.equal``) for every registered training solver, running statistics
identical, measured peak within 10% of ``predict`` (to the byte on U-Net and GoogLeNet, and on
a schedule that recomputes values many times).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree
from torch import nn

from .capture import Output, Program, Step, register_outputs, signature
from .graph import Graph
from .plan import Plan
from .plan import Step as ScheduleStep
from .simulate import Simulation
from .errors import StepError


def executed_schedule(graph: Graph, plan: Plan | list[str] | set[str]) -> list[ScheduleStep]:
    """The step schedule the runtime follows for a plan, or for a bare kept set.

    For a kept set: ``schedule.from_kept``. For a plan: of its kept set lowered that way and its
    own schedule (when ``schedule.executable``), the one of lower simulated peak, then lower
    recompute cost. So MILP and TWRemat schedules run as planned (a value recomputed, freed and
    recomputed again), and stage plans run lazily when that needs less memory.
    """
    return _executed(graph, plan)[0]


def predict(graph: Graph, plan: Plan | list[str] | set[str]) -> Simulation:
    """Simulated peak and recompute cost of what the runtime executes for a plan or kept set."""
    return _executed(graph, plan)[1]


def _executed(graph: Graph, plan: Plan | list[str] | set[str]) -> tuple[list[ScheduleStep], Simulation]:
    """One definition, torch-free, shared with the solvers that judge plans as executed."""
    from .solvers.selective import executed, predict as executed_plan

    return executed_plan(graph, plan) if isinstance(plan, Plan) else executed(graph, plan)


@dataclass
class Instances:
    """Each computation of a value in a schedule (index 0: the forward pass's), with how many
    backward-part reads it has before the next one and whether the last of them is the value's
    own backward step (then it may shrink to ``Node.saved_mem`` before that step); and the
    recomputations to run when autograd reaches each backward step."""

    reads: dict[str, list[int]]
    ends_own: dict[str, list[bool]]
    segments: dict[str, list[str]]

    @classmethod
    def of(cls, graph: Graph, steps: list[ScheduleStep]) -> "Instances":
        reads: dict[str, list[int]] = {v: [] for v in graph.order}
        own: dict[str, list[bool]] = {v: [] for v in graph.order}
        segments: dict[str, list[str]] = {}
        pending: list[str] = []
        in_backward = False
        for kind, v in steps:
            if kind == "free":
                continue
            in_backward = in_backward or kind == "bwd" or bool(reads[v])
            if in_backward:  # forward-pass reads are the forward's business, not counted here
                for u in (graph[v].inputs if kind == "fwd" else graph[v].saved):
                    reads[u][-1] += 1
                    own[u][-1] = kind == "bwd" and u == v
            if kind == "fwd":
                reads[v].append(0)
                own[v].append(False)
                if in_backward:
                    pending.append(v)
            elif pending:
                segments[v], pending = pending, []
        return cls(reads, own, segments)


@dataclass
class Compiled:
    """A program with its executed schedule: everything a step needs, computed once per input
    signature."""

    program: Program
    kept: frozenset[str]          # values the forward pass holds for the backward
    instances: Instances
    steps_by_name: dict[str, Step]
    pos: dict[str, int]
    prediction: Simulation
    plan: Any = None
    recomputes: int = 0  # ops the schedule computes a second time; 0: the plain step, run as is

    @classmethod
    def of(cls, program: Program, kept: list[str] | set[str], plan: Any = None) -> "Compiled":
        """For ``plan`` when given (``executed_schedule`` picks its form), else for ``kept``."""
        g = program.graph
        steps, prediction = _executed(g, plan if plan is not None else kept)
        forwards = [v for kind, v in steps if kind == "fwd"]
        inst = Instances.of(g, steps)
        return cls(program=program, kept=frozenset(v for v in g.order if inst.reads[v][0] > 0), instances=inst,
                   steps_by_name={s.name: s for s in program.steps},
                   pos={v: i for i, v in enumerate(g.order)}, prediction=prediction, plan=plan,
                   recomputes=len(forwards) - len(set(forwards)))


@dataclass
class _Handle:
    packer: str
    tensor: torch.Tensor | None = None  # held as is (parameters, inputs, unmodelled)
    ref: tuple[str, int | None] | None = None  # (fx value, tuple index) of an activation


@dataclass
class StepStats:
    recomputed: int = 0           # ops recomputed in the backward
    unplanned: int = 0            # recomputations the schedule did not foresee
    unmatched: int = 0            # saved tensors traced to no value: held as they are, unplanned


class _Step:
    """The state of one training step: values held for the backward, handles, RNG states."""

    def __init__(self, c: Compiled, consts: dict[str, Any], stats: StepStats) -> None:
        self.c = c
        self.graph = c.program.graph
        self.consts = consts
        self.store: dict[str, Any] = {}
        self.remaining = {v: r[0] for v, r in c.instances.reads.items()}
        self.instance = dict.fromkeys(self.graph.order, 0)
        # values whose own backward, still to come, keeps only some of their outputs (Node.saved_mem)
        self.self_pending = {v for v in self.graph.order
                             if self.graph[v].saved_mem is not None and v in self.graph[v].saved}
        self.shrunk: set[str] = set()
        self.rng: dict[str, tuple] = {}
        self.handles: dict[str, list[_Handle]] = {}
        self.unpacked: dict[str, int] = {}
        self.materialized: set[str] = set()
        self.ident: dict[int, tuple[Any, str, int | None]] = {}
        self.pending: list[tuple[_Handle, torch.Tensor]] = []
        self.current = ""
        self.in_backward = False
        self.stats = stats

    # ---- forward --------------------------------------------------------------------------
    def forward(self) -> dict[str, Any]:
        prog = self.c.program
        env: dict[str, Any] = dict(self.consts)
        for name, value in self.consts.items():
            self._register(name, value)
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            for i, s in enumerate(prog.steps):
                args, kwargs = _bind(s, env.__getitem__)
                if s.kind == "effect":
                    with torch.no_grad():
                        s.target(*args, **kwargs)
                    continue
                if s.random:
                    self.rng[s.name] = _rng_state()
                self.current = s.name
                out = s.target(*args, **kwargs)
                env[s.name] = out
                self._register(s.name, out)
                self._resolve(s.name)
                if s.kind == "op" and s.name in self.c.kept:
                    self._hold(s.name, out)
                for r in (*s.reads, s.name):
                    if r not in self.consts and prog.last_reader.get(r, -1) <= i:
                        env.pop(r, None)
        self.ident.clear()
        return env

    def _register(self, name: str, value: Any) -> None:
        register_outputs(self.ident, name, value)

    def _pack(self, t: torch.Tensor) -> _Handle:
        h = _Handle(packer=self.current)
        self.pending.append((h, t))
        return h

    def _resolve(self, packer: str) -> None:
        """Turn the tensors the op just saved into references to the values that hold them."""
        for h, t in self.pending:
            hit = self.ident.get(id(t))
            name = hit[1] if hit is not None and hit[0]() is t else None
            step = self.c.steps_by_name.get(name) if name is not None else None
            if step is None or not step.owners:
                h.tensor = t  # a parameter, buffer or input: always in memory anyway
                self.stats.unmatched += name is None
                continue
            h.ref = (name, hit[2])
            self.handles.setdefault(packer, []).append(h)
        self.pending.clear()

    # ---- backward -------------------------------------------------------------------------
    def _unpack(self, h: _Handle) -> torch.Tensor:
        if h.tensor is not None:
            return h.tensor
        if not self.in_backward:
            self.in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)
        w = h.packer
        if w not in self.materialized:
            self.materialized.add(w)
            for u in self.c.instances.segments.get(w, ()):
                self._recompute(u)
            self._materialize(self.graph[w].saved if w in self.graph else ())
        value = self._fx_value(*h.ref)
        self.unpacked[w] = self.unpacked.get(w, 0) + 1
        if self.unpacked[w] == len(self.handles.get(w, ())) and w in self.graph:
            self.self_pending.discard(w)
            for u in self.graph[w].saved:
                self._read(u)
        return value

    def _finish(self) -> None:
        self.store.clear()
        self.rng.clear()

    def _hold(self, v: str, out: Any) -> None:
        """Keep ``out`` for the backward; only the outputs v's own backward keeps, if that is all
        that is left to read (the simulator's shrink to ``Node.saved_mem``)."""
        self.store[v] = out
        self.shrunk.discard(v)
        ends_own = self.c.instances.ends_own[v]
        if self.remaining[v] == 1 and v in self.self_pending and ends_own[min(self.instance[v], len(ends_own) - 1)]:
            keep = self.c.steps_by_name[v].self_saved or ()
            self.store[v] = type(out)(x if i in keep else None for i, x in enumerate(out))
            self.shrunk.add(v)

    def _read(self, u: str) -> None:
        self.remaining[u] -= 1
        if self.remaining[u] <= 0:
            self.store.pop(u, None)
            self.shrunk.discard(u)
        elif u in self.store and u not in self.shrunk:
            self._hold(u, self.store[u])

    def _materialize(self, needed: tuple[str, ...] | list[str]) -> None:
        """Recompute what ``needed`` lacks, and its missing ancestors, held until read: only
        when autograd asks in an order the schedule did not foresee (counted as unplanned)."""
        missing: set[str] = set()
        stack = [u for u in needed if u not in self.store]
        while stack:
            u = stack.pop()
            if u in missing:
                continue
            missing.add(u)
            stack += [x for x in self.graph[u].inputs if x not in self.store and x not in missing]
        extra = {u: int(u in needed) for u in missing}
        for u in missing:
            for x in self.graph[u].inputs:
                if x in missing:
                    extra[x] += 1
        for u in sorted(missing, key=self.c.pos.__getitem__):
            self.remaining[u] = max(self.remaining[u], 0) + extra[u]
            self._recompute(u, planned=False)
        self.stats.unplanned += len(missing)

    def _recompute(self, v: str, planned: bool = True) -> None:
        s = self.c.steps_by_name[v]
        with torch.no_grad():
            args, kwargs = _bind(s, lambda a: self._fx_value(a, None))
            if s.mutates_state:
                args = tuple(_detach_copy(a) if _is_state(a, s, self) else a for a in args)
            if s.random:
                out = _with_rng(self.rng[v], lambda: s.target(*args, **kwargs))
            else:
                out = s.target(*args, **kwargs)
        if planned:
            self.instance[v] += 1
            reads = self.c.instances.reads[v]
            self.remaining[v] = reads[self.instance[v]] if self.instance[v] < len(reads) else 0
        self._hold(v, out)
        self.stats.recomputed += 1
        for u in self.graph[v].inputs:
            self._read(u)
        if self.remaining[v] <= 0:  # computed for nothing the schedule reads: drop at once
            self.store.pop(v, None)

    def _fx_value(self, name: str, index: int | None) -> Any:
        if name in self.consts:
            value = self.consts[name]
        else:
            s = self.c.steps_by_name[name]
            if s.kind == "op":
                if name in self.shrunk and (index is None or self.store[name][index] is None):
                    del self.store[name]  # an output dropped for good: recompute it below
                    self.shrunk.discard(name)
                if name not in self.store:  # an order the schedule did not foresee
                    self._materialize([name])
                value = self.store[name]
            elif s.target is operator.getitem and isinstance(s.args[0], torch.fx.Node) and not s.kwargs:
                value = self._fx_value(s.args[0].name, s.args[1])  # one output: it may be all that is held
            else:
                with torch.no_grad():
                    args, kwargs = _bind(s, lambda a: self._fx_value(a, None))
                    value = s.target(*args, **kwargs)
        return value if index is None else value[index]


def _bind(s: Step, lookup: Callable[[str], Any]) -> tuple[tuple, dict]:
    args = torch.fx.node.map_arg(s.args, lambda a: lookup(a.name))
    kwargs = torch.fx.node.map_arg(s.kwargs, lambda a: lookup(a.name))
    return tuple(args), dict(kwargs)


def _is_state(value: Any, s: Step, step: _Step) -> bool:
    """A buffer argument of an op that writes into it (BatchNorm's running statistics)."""
    if not isinstance(value, torch.Tensor):
        return False
    return any(value is step.consts.get(ph) for ph in step.c.program.buffer_placeholders)


def _detach_copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def _rng_state() -> tuple:
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _with_rng(state: tuple, fn: Callable[[], Any]) -> Any:
    now = _rng_state()
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1])
    try:
        return fn()
    finally:
        torch.set_rng_state(now[0])
        if now[1] is not None:
            torch.cuda.set_rng_state(now[1])


def run_step_forward(c: Compiled, model: nn.Module, args: tuple, kwargs: dict,
                     stats: StepStats | None = None) -> Any:
    """Forward of one training step under plan ``c``: returns the model's outputs."""
    prog = c.program
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    state = [params[n] if i < prog.num_params else buffers[n] for i, n in enumerate(prog.state_names)]
    leaves = pytree.tree_leaves((args, kwargs))
    inputs = [leaves[i] for i in prog.tensor_positions]
    consts = dict(zip(prog.placeholders, [*state, *inputs]))
    env = _Step(c, consts, stats or StepStats()).forward()
    out = [env[x.name] if isinstance(x, Output) else x for x in prog.out_leaves]
    return pytree.tree_unflatten(out, prog.out_spec)


class RematModule(nn.Module):
    """The optimized model: ``forward`` trains under the plan; eval / no_grad run the model as is,
    and so does training under a plan that recomputes nothing (it keeps what autograd keeps).

    ``module`` is the user's model itself (its parameters, buffers and ``state_dict``, without a
    prefix). A call with a new input signature (shapes, dtypes, train/eval flags) re-plans with
    ``replan`` (set by ``remat.optimize``), or raises if there is none.
    """

    def __init__(self, module: nn.Module, compiled: Compiled,
                 replan: Callable[[tuple, dict], Compiled] | None = None, report: dict | None = None) -> None:
        nn.Module.__init__(self)
        self.module = module
        self._plans: dict[tuple, Compiled] = {compiled.program.key: compiled}
        self._replan = replan
        self.compiled = compiled
        self.report: dict = dict(report or {})
        self.stats = StepStats()

    @property
    def plan(self) -> Any:
        return self.compiled.plan

    @property
    def graph(self) -> Graph:
        return self.compiled.program.graph

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not (torch.is_grad_enabled() and self.module.training):
            return self.module(*args, **kwargs)
        key = signature(self.module, args, kwargs)
        c = self._plans.get(key)
        if c is None:
            if self._replan is None:
                raise StepError("remat: these inputs (shapes, dtypes or train/eval flags) differ from the "
                                "ones the plan was made for; call remat.optimize again with them")
            c = self._plans[key] = self._replan(args, kwargs)
        self.compiled = c
        if c.recomputes == 0:  # a plan that recomputes nothing is the plain step: no interpreter
            return self.module(*args, **kwargs)
        return run_step_forward(c, self.module, args, kwargs, self.stats)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)


def wrap(model: nn.Module, example_inputs: Any, kept: list[str] | set[str], program: Program | None = None,
         plan: Any = None) -> RematModule:
    """A RematModule keeping ``kept`` (a low-level entry point; ``remat.optimize`` plans for you)."""
    from .capture import trace

    program = program or trace(model, example_inputs)
    return RematModule(model, Compiled.of(program, kept, plan))
