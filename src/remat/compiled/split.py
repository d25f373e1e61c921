"""A step schedule -> two fx graphs: the forward saves exactly the kept values, the backward
recomputes what the schedule says where it says it, a copy per recomputation.

The forward graph is the one AOTAutograd extracts for our saved values (``forward_graph``, node
for node), so its calling convention is the one AOTAutograd's runtime expects. The backward graph is written
here, over that graph's placeholders (saved values, then tangents):

- backward ops are emitted in the joint graph's order (autograd's);
- before the first op of a node's backward step, the recomputations the schedule places there
  are emitted (``Instances.segments``): each is a fresh copy of the forward op, reading the
  current copies of its inputs, so a value recomputed twice (MILP, TWRemat) is two nodes;
- a forward value a backward op reads comes from the current recomputed copy, else from the
  saved values (only the plan's kept values are there), else it is recomputed on the spot with
  its missing ancestors (an order the schedule did not foresee: counted in ``unplanned``);
- views and ``getitem`` of a copy are re-derived from that copy; fx's code generation frees
  every value after its last use, which is the liveness the simulator assumes.
"""

from __future__ import annotations

import copy
import operator
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._functorch._aot_autograd.descriptors import SavedForBackwardsAOTOutput
from torch._functorch._aot_autograd.utils import _is_bwd_seed_offset, _is_fwd_seed_offset, _is_primal, _is_tangent
from torch._functorch.partitioners import (_extract_fwd_bwd_outputs, _extract_graph_with_inputs_outputs,
                                           _must_be_in_backward)
from torch.fx._lazy_graph_module import _make_graph_module

from ..plan import Step
from . import batchnorm
from .dynamic import is_symbolic
from .jointgraph import STATE_SUFFIX, JointGraph, is_forward, is_tangent, unused_reads


@dataclass
class Split:
    forward: fx.GraphModule
    backward: fx.GraphModule
    saved: list[str]        # fx names of the forward values the backward receives
    recomputed: int         # forward ops emitted in the backward
    unplanned: int          # of those, recomputed on demand (not where the schedule said)


def kept_values(jg: JointGraph, steps: list[Step]) -> set[str]:
    """Planning ids whose forward copy a backward-part step reads (what the forward saves)."""
    from ..runtime import Instances

    inst = Instances.of(jg.graph, steps)
    return {v for v in jg.graph.order if inst.reads[v][0] > 0}


def split(jg: JointGraph, steps: list[Step], forwards: dict | None = None) -> Split:
    """Forward and backward graphs that execute ``steps`` (an executable training schedule).
    ``forwards``: a planning call's ``Forward`` per joint graph, whose one forward graph is
    edited from split to split (judging plans only: see ``Forward``)."""
    from ..runtime import Instances

    inst = Instances.of(jg.graph, steps)
    kept = {v for v in jg.graph.order if inst.reads[v][0] > 0}
    emitter = _Emitter(jg, kept, inst.segments)
    needed = emitter.needed_saved()
    saved = [n for n in needed if not is_symbolic(n)]
    syms = [n for n in needed if is_symbolic(n)]
    if jg.sized:  # (static graphs, split for every plan judged, have no symbols to bind)
        syms = _with_bindings(jg.gm.graph, syms, saved)
    fwd_out, bwd_out, fwd_descs, bwd_descs = _extract_fwd_bwd_outputs(jg.gm, num_fwd_outputs=jg.num_fwd_outputs)
    placeholders = list(jg.gm.graph.find_nodes(op="placeholder"))
    primals = [n for n in placeholders if _is_primal(n)]
    inputs = primals + [n for n in placeholders if _is_fwd_seed_offset(n)]
    replayed = emitter.replayed()
    maker = forwards.get(id(jg.gm.graph)) if forwards is not None else None
    if maker is None or maker.size != len(jg.gm.graph.nodes):  # (a joint graph edited since: built again)
        maker = Forward(jg.gm.graph, inputs)
        if forwards is not None:
            forwards[id(jg.gm.graph)] = maker
    # a forward that saves generator states is edited after (``_save_generator_states``): made afresh
    fw_graph = maker.graph_for(fwd_out + saved + syms,
                               fwd_descs + [SavedForBackwardsAOTOutput(i) for i in range(len(saved) + len(syms))],
                               fresh=forwards is None or bool(replayed))
    _save_generator_states(fw_graph, [jg.node_of[u].name for u in replayed], len(fwd_out))
    fw = _make_graph_module(jg.gm, fw_graph)
    bw_inputs = saved + [n for n in placeholders if _is_tangent(n) or _is_bwd_seed_offset(n)]
    bw = emitter.emit(bw_inputs, bwd_out, bwd_descs, syms)
    return Split(forward=fw, backward=bw, saved=[n.name for n in syms] +
                 [jg.node_of[u].name + STATE_SUFFIX for u in replayed] + [n.name for n in saved],
                 recomputed=emitter.recomputed,
                 unplanned=emitter.unplanned)


def forward_graph(joint: fx.Graph, inputs: list[fx.Node], outputs: list, descs: list) -> fx.Graph:
    """The forward graph AOTAutograd's ``_extract_graph_with_inputs_outputs(..., "forward")``
    makes, node for node (the same nodes, names, order and metadata), copying only the nodes
    it keeps: that function copies every node computable from ``inputs`` (most of a joint
    graph's forward, whatever the outputs) and then eliminates the dead ones, which was half of
    splitting a plan, and splitting is half of judging one (ResNet-152: 90 plans judged for a
    first call). Falls back on it where an output cannot be computed from ``inputs``."""
    return Forward(joint, inputs).graph_for(outputs, descs, fresh=True)


class Forward:
    """The forward graphs of one joint graph for any saved values (``forward_graph``).

    ``graph_for(..., fresh=False)`` edits one graph from call to call instead: it inserts the
    nodes the new outputs need and erases those no longer read (a few, where two plans differ
    in what they save; a ResNet-152's forward has 6,000 nodes). For judging plans only: that
    graph changes under the GraphModules made from it, and a node copied in again is renamed."""

    def __init__(self, joint: fx.Graph, inputs: list[fx.Node]) -> None:
        self.joint, self.inputs = joint, inputs
        self.size = len(joint.nodes)
        known = set(inputs)
        valid: set[fx.Node] = set(inputs)
        for n in joint.nodes:
            if n in known or n.op in ("placeholder", "output") or _must_be_in_backward(n):
                continue
            if n.op == "get_attr" or (n.op == "call_function" and all(a in valid for a in n.all_input_nodes)):
                valid.add(n)
        self.valid = valid
        self.order = [n for n in joint.nodes if n in valid and n not in known]  # what a forward may copy
        impure_random = torch._inductor.config.fallback_random if torch._guards.TracingContext.try_get() else True
        # what dead-code elimination keeps whatever reads it: side effects (batch norm's statistics)
        self.impure = [n for n in self.order if n.op != "get_attr" and n.is_impure(impure_random)]
        self.graph: fx.Graph | None = None  # the edited one, and its nodes by joint node
        self.env: dict[fx.Node, fx.Node] = {}

    def _live(self, wanted: list[fx.Node]) -> set[fx.Node]:
        live: set[fx.Node] = set()
        stack = wanted + self.impure
        while stack:  # the outputs, the side effects, and what they read
            n = stack.pop()
            if n not in live:
                live.add(n)
                stack.extend(a for a in n.all_input_nodes if a not in live)
        return live

    def _new(self) -> tuple[fx.Graph, dict[fx.Node, fx.Node]]:
        g = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}
        for n in self.inputs:  # placeholders in the inputs' order (one may stand for a call_function)
            env[n] = g.placeholder(n.name)
            env[n].meta = n.meta
        return g, env

    def graph_for(self, outputs: list, descs: list, fresh: bool = False) -> fx.Graph:
        """The forward graph returning ``outputs`` (see the class docstring for ``fresh=False``)."""
        wanted = [x for x in outputs if isinstance(x, fx.Node)]
        if any(x not in self.valid for x in wanted):
            return _extract_graph_with_inputs_outputs(self.joint, self.inputs, outputs, descs, "forward")
        live = self._live(wanted)
        if fresh or self.graph is None:
            g, env = self._new()
            out = None
        else:
            g, env = self.graph, self.env
            out = next(iter(g.find_nodes(op="output")))
        last = next(reversed(g.find_nodes(op="placeholder")), None) if self.inputs else None
        for n in self.order:  # in the joint graph's order
            if n not in live:
                continue
            if n not in env:
                if out is None:
                    env[n] = _copy(g, n, env.__getitem__)
                else:
                    with g.inserting_after(last) if last is not None else g.inserting_before(None):
                        env[n] = _copy(g, n, env.__getitem__)
            last = env[n]
        values = tuple(env[x] if isinstance(x, fx.Node) else x for x in outputs)
        if out is None:
            out = g.output(values)
        else:
            out.args = (values,)
            for n in reversed(self.order):  # readers first
                if n in env and n not in live:
                    g.erase_node(env.pop(n))
        out.meta["desc"] = descs
        out.meta["output_stack_traces"] = [v.meta.get("stack_trace") if isinstance(v, fx.Node) else None for v in values]
        if not fresh:
            self.graph, self.env = g, env
        return g


class _Emitter:
    """Walks the backward ops once to find the saved values, then writes the backward graph."""

    def __init__(self, jg: JointGraph, kept: set[str], segments: dict[str, list[str]]) -> None:
        self.jg = jg
        self.kept = kept
        self.segments = segments
        self.recomputed = 0
        self.unplanned = 0
        self._replayed: dict[str, None] = {}  # random planning ids the backward recomputes

    def replayed(self) -> list[str]:
        """Random planning ids the backward recomputes (after ``needed_saved``), in forward order:
        the forward saves the generator state before each, the backward replays from it."""
        order = {v: i for i, v in enumerate(self.jg.graph.order)}
        return sorted(self._replayed, key=order.__getitem__)

    # the walk, shared by both passes: ``read`` returns the value for a forward fx node
    def _walk(self, read, recompute, emit) -> None:
        started: set[str] = set()
        for b in self.jg.backward:
            v = self.jg.group.get(b)
            if v is not None and v not in started:
                started.add(v)
                for u in self.segments.get(v, ()):
                    recompute(u, True)
            emit(b)

    def _available_from_forward(self, a: fx.Node) -> bool:
        owners = self.jg.owners.get(a, ())
        return all(o in self.kept for o in owners)

    def needed_saved(self) -> list[fx.Node]:
        """Forward fx values the backward reads from the forward pass, in joint order."""
        copies: set[str] = set()
        saved: dict[fx.Node, None] = {}

        def read(a: fx.Node) -> None:
            if a.op == "get_attr":
                return
            owners = self.jg.owners.get(a, ())
            if not owners:
                saved[a] = None  # a primal or a view of one
                return
            if all(o in copies for o in owners):  # derived from the copies (dynamic shapes: and from sizes)
                if self.jg.sized:
                    for x in a.all_input_nodes:  # the sizes it reads, and those of the views it is made from
                        if is_symbolic(x) or (self.jg.node_of.get(x.name) is not x and self.jg.owners.get(x)):
                            read(x)
                return
            if self._available_from_forward(a) and not any(o in copies for o in owners):
                saved[a] = None
                return
            for o in owners:
                if o not in copies:
                    recompute(o, False)

        def recompute(u: str, planned: bool) -> None:
            if u in self.jg.normalized:  # a batch norm's output, from its statistics
                ins = batchnorm.reads(self.jg.node_of[self.jg.normalized[u]])
            else:
                ins = _without_state_update(self.jg.node_of[u]).all_input_nodes
            for a in ins:
                read(a)
            copies.add(u)
            if u in self.jg.states:
                self._replayed[u] = None

        def emit(b: fx.Node) -> None:
            for a in _without_unused_reads(b).all_input_nodes:
                if is_forward(a) or a.op == "placeholder" and not is_tangent(a):
                    read(a)

        self._walk(read, recompute, emit)
        order = {n: i for i, n in enumerate(self.jg.gm.graph.nodes)}
        return sorted(saved, key=order.__getitem__)

    def emit(self, inputs: list[fx.Node], outputs: list, descs: list, syms: list[fx.Node] = ()) -> fx.GraphModule:
        """The backward graph: ``syms`` (saved symbolic sizes: AOTAutograd passes them first), the
        generator states, ``inputs`` (saved values, tangents) in, ``outputs`` (gradients) out."""
        g = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}       # joint node -> node in g (saved, tangents, backward)
        copy_of: dict[str, dict[fx.Node, fx.Node]] = {}  # planning id -> joint fx value -> its current copy
        state_of: dict[str, fx.Node] = {}  # random planning id -> its generator state (saved first)
        for n in syms:
            env[n] = g.placeholder(n.name)
            env[n].meta = dict(n.meta)
        for u in self.replayed():
            state_of[u] = g.placeholder(f"{self.jg.node_of[u].name}{STATE_SUFFIX}")
            state_of[u].meta["val"] = _fake_state(self.jg.node_of[u])
        for n in inputs:
            new = g.placeholder(n.name)
            new.meta = dict(n.meta)
            env[n] = new
        owner = self.jg.owners

        def value(a: fx.Node) -> fx.Node:
            if a.op == "get_attr":  # a constant of the joint graph
                if a not in env:
                    env[a] = _copy(g, a)
                return env[a]
            os_ = owner.get(a, ())
            if a in env and not any(o in copy_of for o in os_):
                return env[a]
            if os_ and all(o in copy_of for o in os_):
                return derived(a)
            if a in env:
                return env[a]
            for o in os_:  # neither saved nor recomputed yet: recompute on demand
                if o not in copy_of:
                    recompute(o, False)
            return derived(a)

        def derived(a: fx.Node) -> fx.Node:
            """``a`` on top of the current copies of its owners (views re-derived once per copy)."""
            os_ = owner[a]
            cache = copy_of[os_[0]]
            if a in cache:
                return cache[a]
            new = _copy(g, a, value)
            for o in os_:
                copy_of[o][a] = new
            return new

        def recompute(u: str, planned: bool) -> None:
            if u in self.jg.normalized:  # a batch norm's output, from its saved statistics
                bn = self.jg.node_of[self.jg.normalized[u]]
                copy_of[u] = {batchnorm.outputs(bn)[0]: batchnorm.call(g, bn, value)}
                self.recomputed += 1
                self.unplanned += not planned
                return
            n = self.jg.node_of[u]
            if u in state_of:  # the same draws as the forward's: run from the generator state saved before it
                args, kwargs = fx.map_arg((n.args, n.kwargs), value)
                new = g.call_function(_RUN_WITH_STATE, (state_of[u], n.target, *args), kwargs)
                new.meta = dict(n.meta)
            else:
                new = _copy(g, _without_state_update(n), value)
            copy_of[u] = {n: new}
            # every output of a multi-output op the backward reads, right away: a getitem derived
            # later (batch norm's mean, read by its backward step) would keep the whole tuple, the
            # large output included, alive until then
            for user in n.users:
                if (user.target is operator.getitem and (new.target is not _BN_NO_STATS or user.args[1] < 3)
                        and all(o in copy_of for o in owner.get(user, (u,)))
                        and any(not is_forward(x) for x in user.users)):
                    derived(user)
            self.recomputed += 1
            self.unplanned += not planned

        def emit(b: fx.Node) -> None:
            env[b] = _copy(g, _without_unused_reads(b), lambda x: env[x] if (x in env and not is_forward(x))
                                 else value(x))

        self._walk(value, recompute, emit)
        out = g.output(tuple(env[x] if isinstance(x, fx.Node) else x for x in outputs))
        out.meta["desc"] = descs
        for n in g.nodes:
            if n.op == "call_function":
                n.meta["autograd_backward"] = True
        g.lint()
        return _make_graph_module(self.jg.gm, g)


def _copy(g: fx.Graph, n: fx.Node, transform=lambda x: x) -> fx.Node:
    """``g.node_copy(n, transform)``, its arguments set after the node is made: ``create_node``
    scans every argument for raw symbolic values to warn about (torch 2.13), a third of the time
    a split takes, and a split is made for every plan judged (a tiny 8-layer Llama: 52 for its
    first compiled step). AOTAutograd's graphs pass sizes as nodes, never raw."""
    args, kwargs = fx.map_arg(n.args, transform), fx.map_arg(n.kwargs, transform)
    new = g.create_node(n.op, n.target, name=n.name, type_expr=n.type)
    new.args = args
    if kwargs:
        new.kwargs = kwargs
    new.meta = copy.copy(n.meta)
    return new


def _with_bindings(graph: fx.Graph, syms: list[fx.Node], saved: list[fx.Node]) -> list[fx.Node]:
    """``syms`` and the nodes binding every symbol the saved values' and tangents' shapes use,
    binding ones first (``_extract_fwd_bwd_modules``'s rule: the backward's sizes must be bound by
    its inputs)."""
    from torch.fx.experimental.symbolic_shapes import (find_symbol_binding_fx_nodes, free_symbols,
                                                       is_symbol_binding_fx_node)

    if not syms and not any(free_symbols(n.meta.get("val")) for n in saved if "val" in n.meta):
        return []
    bindings = find_symbol_binding_fx_nodes(graph)
    bound = {s: n for n in syms if (s := is_symbol_binding_fx_node(n))}
    derived = [n for n in syms if not is_symbol_binding_fx_node(n)]
    tangents = [n for n in graph.find_nodes(op="placeholder") if _is_tangent(n)]
    for n in [*derived, *saved, *tangents]:
        for s in sorted(free_symbols(n.meta.get("val")) - set(bound), key=lambda s: s.name):
            if s in bindings:
                bound[s] = bindings[s]
    return list(dict.fromkeys([*bound.values(), *derived]))


_RUN_AND_SAVE = torch._prims.rng_prims.run_and_save_rng_state
_RUN_WITH_STATE = torch._prims.rng_prims.run_with_rng_state


def _fake_state(n: fx.Node) -> torch.Tensor:
    """A fake tensor shaped like the generator state of ``n``'s device (what the graphs carry)."""
    val = next(t for t in pytree.tree_leaves(n.meta["val"]) if isinstance(t, torch.Tensor))
    real = torch.cuda.get_rng_state() if val.device.type == "cuda" else torch.get_rng_state()
    fake_mode = getattr(val, "fake_mode", None)
    if fake_mode is None:
        return real
    with fake_mode:
        return fake_mode.from_tensor(real, static_shapes=True)


def _save_generator_states(fw: fx.Graph, names: list[str], num_fwd_outputs: int) -> None:
    """Each named random op of the forward becomes ``run_and_save_rng_state``: the same draws,
    and the generator state before them, returned as the first saved values (the backward's
    first inputs), ahead of any saved symbolic sizes, which AOTAutograd expects last."""
    if not names:
        return
    by_name = {n.name: n for n in fw.nodes}
    states = []
    for name in names:
        n = by_name[name]
        with fw.inserting_before(n):
            pair = fw.call_function(_RUN_AND_SAVE, (n.target, *n.args), dict(n.kwargs))
            state = fw.call_function(operator.getitem, (pair, 0))
            out = fw.call_function(operator.getitem, (pair, 1))
        state.meta["val"] = _fake_state(n)
        pair.meta = {k: v for k, v in n.meta.items() if k != "val"}
        out.meta = dict(n.meta)
        n.replace_all_uses_with(out)
        fw.erase_node(n)
        states.append(state)
    output = next(iter(fw.find_nodes(op="output")))
    outs = list(output.args[0])
    descs = list(output.meta.get("desc") or [])
    outs[num_fwd_outputs:num_fwd_outputs] = states
    if descs:
        saved = [SavedForBackwardsAOTOutput(i) for i in range(len(outs) - num_fwd_outputs)]
        descs = descs[:num_fwd_outputs] + saved
    output.args = (tuple(outs),)
    if descs:
        output.meta["desc"] = descs
    fw.lint()


_BN_FUNCTIONAL = torch.ops.aten._native_batch_norm_legit_functional.default
_BN_NO_STATS = torch.ops.aten._native_batch_norm_legit.no_stats


def _without_state_update(n: fx.Node) -> fx.Node:
    """The op to recompute ``n`` with: training batch norm without its running statistics.

    The forward updates BatchNorm's running statistics in place (the kernel itself, or a copy after
    it), so a recomputation must neither read them (autograd would see a saved tensor
    modified in place) nor move them again. Outputs 0-2 (output, mean, inverse std) of the
    no-stats variant are the same kernel's, bit for bit.
    """
    if n.target is _BN_FUNCTIONAL and len(n.args) >= 6 and n.args[5] is True:
        x, w, b, _rm, _rv, training, momentum, eps = n.args[:8]
        stand_in = fx.Node(n.graph, n.name, "call_function", _BN_NO_STATS, (x, w, b, training, momentum, eps), {})
        stand_in.meta = dict(n.meta)
        return stand_in
    return n


def _without_unused_reads(n: fx.Node) -> fx.Node:
    """``n`` with the arguments its kernel never reads set to None (``jointgraph.unused_reads``):
    training batch norm's backward takes the running statistics but uses the saved batch ones."""
    drop = unused_reads(n)
    if not drop:
        return n
    args = tuple(None if i in drop else a for i, a in enumerate(n.args))
    stand_in = fx.Node(n.graph, n.name, "call_function", n.target, args, dict(n.kwargs))
    stand_in.meta = dict(n.meta)
    return stand_in
