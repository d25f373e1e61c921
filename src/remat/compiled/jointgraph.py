"""AOTAutograd joint graph -> planning Graph: the values a plan decides about are the joint
graph's own forward nodes, so the plan and the code it compiles to are one program.

AOTAutograd traces one training step as a single fx graph (``primals_*`` and ``tangents_*`` in,
forward outputs and parameter gradients out), functionalized, with autocast casts and buffer
updates (BatchNorm statistics) explicit. Its nodes carry ``partitioner_tag`` (``is_forward`` /
``is_backward``) and ``seq_nr``: a backward node has the sequence number of the forward op whose
autograd node produced it. From that:

- a planning node per forward op that owns new storage (``mem`` = bytes of its fresh storages,
  taken from the fake values in ``node.meta["val"]``); views and ``getitem`` are aliases of it;
- ``inputs``: the planning nodes owning what the op reads;
- the backward step of a node is the run of backward ops with its ``seq_nr``; what they read of
  the forward becomes its ``bwd_uses``, which outputs of a tuple op they read its ``saved_mem``;
- ``requires_grad``: a gradient flows from a primal that gets one (its gradient output is not
  None) through floating-point values; ``grad_alias`` as in ``capture`` (add, clone, cat);
- a primal (weight) read by several planning nodes, directly or through views, gets its gradient
  in parts, one from each reader's backward: ``graph.shared_grads`` (``simulate`` counts them).

Costs (``cost=``): ``"flops"``, ``"roofline"`` (seconds on the device: max(flops / peak, bytes
moved / bandwidth)), ``"profile"`` (seconds measured per distinct op, cached on disk) or
``"paper"``, or ``"auto"``, the one ``costs.BEST`` names for the graph's device; see ``costs``.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef

from ..graph import Graph
from ..errors import CaptureError
from . import batchnorm, costs
from .mutated import mutated_inputs, reads_old_data
# the cost models live in ``costs``; their names stay importable from here
from .costs import DEVICES, _cost, bytes_moved, device_figures, flops, op_name, roofline, total_cost  # noqa: F401

MODULE_KEY = "remat_module"


@dataclass
class JointGraph:
    """A joint graph, the planning Graph built from it, and how the two correspond."""

    gm: fx.GraphModule
    num_fwd_outputs: int
    graph: Graph
    node_of: dict[str, fx.Node]                  # planning id -> the fx op that computes it
    owners: dict[fx.Node, tuple[str, ...]]       # forward fx value -> planning ids whose storage it is in
    group: dict[fx.Node, str | None]             # backward fx node -> planning id of its backward step
    forward: list[fx.Node] = field(default_factory=list)   # forward call_function nodes, in order
    backward: list[fx.Node] = field(default_factory=list)  # backward call_function nodes, in order
    random: frozenset[str] = frozenset()         # planning ids that draw random numbers
    states: dict[str, str] = field(default_factory=dict)  # random id -> id of the generator state it replays
    # a batch norm's output recomputed from its statistics (``batchnorm``): its planning id -> the
    # planning id of the batch norm itself (its statistics; ``node_of`` has the fx op)
    normalized: dict[str, str] = field(default_factory=dict)
    # planning ids whose op reads a graph input the step writes into (``mutated_inputs``)
    reads_mutated: frozenset[str] = frozenset()

    @property
    def pinned(self) -> frozenset[str]:
        """What a plan must keep: the generator states (a recomputation would read a later state),
        the draws that cannot be replayed (``replayable``), split batch norms' statistics (a few
        bytes a channel, and recomputing them is the whole batch norm) and the values read from an
        input the forward writes into (a recomputation in the backward would read the new data)."""
        return frozenset(self.states.values()) | frozenset(v for v in self.random if v not in self.states) | \
            frozenset(self.normalized.values()) | self.reads_mutated
    unmodeled: int = 0                           # bytes backward ops read that no backward step accounts
    cost_notes: list[str] = field(default_factory=list)  # what the cost model could not do as asked
    cost: str = "flops"                          # the cost model the graph's costs are in ("auto" resolved)

    def on(self, gm: fx.GraphModule) -> "JointGraph":
        """This joint graph with its fx nodes taken from ``gm``, a graph with the same node names
        (``dynamic.hinted``: planned on the hinted copy, split on the symbolic original)."""
        by_name = {n.name: n for n in gm.graph.nodes}
        _tag_untagged(list(gm.graph.nodes))
        return dataclasses.replace(
            self, gm=gm, node_of={v: by_name[n.name] for v, n in self.node_of.items()},
            owners={by_name[n.name]: o for n, o in self.owners.items()},
            group={by_name[n.name]: v for n, v in self.group.items()},
            forward=[by_name[n.name] for n in self.forward], backward=[by_name[n.name] for n in self.backward])

    @functools.cached_property
    def sized(self) -> bool:
        """Whether the graph computes sizes (a dynamic-shape graph, or its hinted copy)."""
        from .dynamic import is_symbolic

        return any(is_symbolic(n) for n in self.gm.graph.nodes)

    @functools.cached_property
    def fusible(self) -> frozenset[str]:
        """Planning ids inductor can make inside a fused kernel (pointwise ops, reductions, casts;
        not matmuls, attention or other extern kernels and fallbacks, not random draws): recomputed
        there, they take no buffer of their own (``codepeak.fused_values``)."""
        from .codepeak import _extern

        return frozenset(v for v, n in self.node_of.items() if not _extern(n) and v not in self.random)


def _is_tag(n: fx.Node, tag: str) -> bool:
    return n.meta.get("partitioner_tag") == tag


def is_forward(n: fx.Node) -> bool:
    return n.op == "call_function" and _is_tag(n, "is_forward")


def is_backward(n: fx.Node) -> bool:
    return n.op == "call_function" and _is_tag(n, "is_backward")


def is_tangent(n: fx.Node) -> bool:
    return n.op == "placeholder" and ("tangent" in n.name or _is_tag(n, "is_backward"))


def _tensors(val: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(val) if isinstance(t, torch.Tensor)]


def _nbytes(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):  # a subclass without storage: dense size
        return t.numel() * t.element_size()


def is_random(n: fx.Node) -> bool:
    return n.op == "call_function" and torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())


# ops whose output never requires grad, whatever their inputs (they read shapes, or draw numbers)
_NOT_DIFFERENTIABLE = frozenset({
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like",
    "bernoulli", "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided", "empty_strided"})


def _no_grad(n: fx.Node) -> bool:
    packet = getattr(n.target, "overloadpacket", None)
    return packet is not None and packet.__name__ in _NOT_DIFFERENTIABLE


STATE_SUFFIX = "_rng_state"
_REPLAY_DEVICES = ("cpu", "cuda")


def _device_type(n: fx.Node) -> str | None:
    devices = {t.device.type for t in _tensors(n.meta.get("val"))}
    return devices.pop() if len(devices) == 1 else None


def replayable(n: fx.Node) -> bool:
    """A random op whose draws a recomputation can replay: one device whose generator state
    ``torch.get_rng_state`` / ``torch.cuda.get_rng_state`` reads, and an OpOverload that
    ``run_with_rng_state`` can call. Not inductor's seeds (``prims.inductor_seeds``, drawn once
    per graph; its ``inductor_random`` ops are deterministic in them): inductor cannot lower their
    replay, and the few bytes are kept."""
    if "inductor_seeds" in str(n.target):
        return False
    return _device_type(n) in _REPLAY_DEVICES and isinstance(n.target, torch._ops.OpOverload)


def rng_state_bytes(n: fx.Node) -> int:
    """Bytes of the generator state saved for a replay (5056 on the CPU, 16 on CUDA)."""
    if _device_type(n) == "cuda":
        return 16  # seed and offset of the Philox generator
    return int(torch.get_rng_state().numel())


_BN_BACKWARD = ("native_batch_norm_backward.default",)


def unused_reads(n: fx.Node) -> tuple[int, ...]:
    """Argument positions an op takes but does not read: training batch norm's backward uses the
    saved batch statistics, not the running ones (positions 3 and 4), so they are not saved."""
    if str(n.target).replace("aten.", "") in _BN_BACKWARD and len(n.args) > 7 and n.args[7] is True:
        return (3, 4)
    return ()


def build(gm: fx.GraphModule, num_fwd_outputs: int, cost: str = "flops", name: str = "model",
          device: Any = None, statistics: bool = True) -> JointGraph:
    """The planning Graph of a joint graph (see module docstring). ``statistics``: a training batch
    norm whose output ``batchnorm.apply_statistics`` reproduces is two planning nodes, its
    statistics and its output (the code runs eagerly; inductor decomposes batch norm itself)."""
    costs.check(cost)
    if statistics:  # eager code: the mixed-dtype CPU kernel's statistics are fp32 (inductor decomposes it)
        batchnorm.real_statistics(gm)
    nodes = list(gm.graph.nodes)
    cost = costs.resolve(cost, next(filter(None, map(costs.node_device, nodes)), device))  # "auto": the device's
    _tag_untagged(nodes)
    out_node = next(n for n in nodes if n.op == "output")
    outs = list(out_node.args[0])
    primals = [n for n in nodes if n.op == "placeholder" and not is_tangent(n)]
    grads_out = outs[num_fwd_outputs:]
    grad_primal = {p for p, gr in zip(primals, grads_out) if gr is not None}

    owner_of_storage: dict[StorageWeakRef, str | None] = {}
    owners: dict[fx.Node, tuple[str, ...]] = {}
    needs_grad: dict[fx.Node, bool] = {}
    for c in (n for n in nodes if n.op == "get_attr"):  # constants: always in memory, like parameters
        owners[c] = ()
        needs_grad[c] = False
    for p in primals:
        for t in _tensors(p.meta.get("val")):
            owner_of_storage[StorageWeakRef(t.untyped_storage())] = None
        owners[p] = ()
        needs_grad[p] = p in grad_primal

    specs: dict[str, dict] = {}
    node_of: dict[str, fx.Node] = {}
    mutated = mutated_inputs(nodes)  # inputs written into, and the views of them
    reads_mutated: set[str] = set()
    forward = [n for n in nodes if is_forward(n)]
    backward = [n for n in nodes if is_backward(n)]
    seq_owner: dict[int, str] = {}
    states: dict[str, str] = {}  # random planning id -> the planning id of its generator state
    normalized: dict[str, str] = {}  # a split batch norm's output id -> the batch norm's id
    output_of: dict[fx.Node, str] = {}  # a split batch norm -> its output's planning id
    weight_of: dict[fx.Node, fx.Node] = {p: p for p in primals if p in grad_primal}  # views of weights too
    weight_reads: dict[fx.Node, list[fx.Node]] = {}  # a weight -> the ops reading it (their backward: a part)
    for n in forward:
        ins = [a for a in n.all_input_nodes]
        in_owners = tuple(dict.fromkeys(o for a in ins for o in owners.get(a, ())))
        val = n.meta.get("val")
        floating = any(t.is_floating_point() or t.is_complex() for t in _tensors(val))
        needs_grad[n] = floating and any(needs_grad.get(a, False) for a in ins) and not _no_grad(n)
        if n.target is operator.getitem:
            split_out = output_of.get(n.args[0]) if n.args[1] == 0 else None
            owners[n] = (split_out,) if split_out is not None else owners.get(n.args[0], ())
            needs_grad[n] = needs_grad[n.args[0]] and floating
            continue
        split_out = f"{n.name}{batchnorm.OUTPUT_SUFFIX}" if statistics and batchnorm.splittable(n, is_forward) \
            else None
        fresh, alias = 0, []
        for t in _tensors(val):
            ref = StorageWeakRef(t.untyped_storage())
            if ref in owner_of_storage:
                if owner_of_storage[ref] is not None:
                    alias.append(owner_of_storage[ref])
                continue
            owner_of_storage[ref] = n.name
            fresh += _nbytes(t)
        if fresh == 0 and _tensors(val):  # a view: lives in its base's storage
            owners[n] = tuple(dict.fromkeys(alias)) or in_owners
            if not alias and (w := next((weight_of[a] for a in ins if a in weight_of), None)) is not None:
                weight_of[n] = w
            if not alias and any(a in mutated for a in ins):
                mutated.add(n)
            continue
        if not _tensors(val):
            owners[n] = ()
            continue
        owners[n] = (n.name,)
        node_of[n.name] = n
        for w in dict.fromkeys(weight_of[a] for a in ins if a in weight_of):
            weight_reads.setdefault(w, []).append(n)
        if reads_old_data(n, mutated):
            reads_mutated.add(n.name)
        if is_random(n) and replayable(n):  # its draws are replayed from the generator state before it
            sid = states[n.name] = f"{n.name}{STATE_SUFFIX}"
            specs[sid] = {"mem": rng_state_bytes(n), "cost": 0.0, "inputs": (), "op": "rng_state",
                          "requires_grad": False, "module": module_path(n)}
            in_owners = (*in_owners, sid)
        specs[n.name] = {"mem": fresh, "cost": 0.0, "inputs": in_owners,  # cost: below, all ops at once
                         "op": op_name(n.target), "requires_grad": needs_grad[n],
                         "module": module_path(n)}
        grad_owner = n.name
        if split_out is not None:  # the statistics keep this id; the output gets one of its own
            out = batchnorm.outputs(n)[0].meta["val"]
            owner_of_storage[StorageWeakRef(out.untyped_storage())] = split_out
            specs[n.name].update(mem=fresh - _nbytes(out), requires_grad=False)
            specs[split_out] = {"mem": _nbytes(out), "inputs": (*in_owners, n.name), "op": "batch_norm_apply",
                                "requires_grad": needs_grad[n], "module": module_path(n),
                                "cost": batchnorm.apply_cost(n, cost, device)}
            normalized[split_out], output_of[n], grad_owner = n.name, split_out, split_out
        seq = n.meta.get("seq_nr")
        if seq is not None and (needs_grad[n] or seq not in seq_owner):
            seq_owner[seq] = grad_owner

    cost_notes: list[str] = []
    for n, c in costs.node_costs(node_of.values(), cost, device, cost_notes).items():
        specs[n.name]["cost"] = c

    # backward steps: runs of backward ops attributed by seq_nr
    group: dict[fx.Node, str | None] = {}
    reads: dict[str, dict[str, None]] = {v: {} for v in specs}
    own_outputs: dict[str, set[int]] = {v: set() for v in specs}
    unmodeled = 0
    current: str | None = None
    for b in backward:
        v = seq_owner.get(b.meta.get("seq_nr"))
        if v is not None:
            current = v
        group[b] = current
        skip = {b.args[i] for i in unused_reads(b)}
        for a in b.all_input_nodes:
            if a in skip or not (is_forward(a) and owners.get(a)):
                continue
            if current is None:
                unmodeled += sum(_nbytes(t) for t in _tensors(a.meta.get("val")))
                continue
            for o in owners[a]:
                reads[current][o] = None
                if o == current:
                    own_outputs[current].add(a.args[1] if a.target is operator.getitem else -1)

    g = Graph(name=name)
    pos = {v: i for i, v in enumerate(specs)}
    for v, s in specs.items():
        inputs = list(s["inputs"])
        uses = []
        for u in reads[v]:
            if u == v or u in inputs:
                uses.append(u)
            elif pos[u] < pos[v]:  # read by v's backward though v does not read it: an extra edge
                inputs.append(u)
                uses.append(u)
            else:
                unmodeled += specs[u]["mem"]
        n = node_of.get(v)
        if v in normalized or (n is not None and n in output_of):  # a split batch norm: no tuple bytes
            g.add_node(v, mem=s["mem"], cost=s["cost"], inputs=inputs, op=s["op"], bwd_uses=uses,
                       requires_grad=s["requires_grad"])
            if s["module"] is not None:
                _set_module(g, v, s["module"])
            continue
        if n is None:  # a generator state: no op of its own, read by its draw (and its replays)
            g.add_node(v, mem=s["mem"], cost=s["cost"], inputs=inputs, op=s["op"], bwd_uses=uses,
                       requires_grad=False)
            if s["module"] is not None:
                _set_module(g, v, s["module"])
            continue
        vals = n.meta.get("val")
        saved_mem = grad_mem = None
        if isinstance(vals, (tuple, list)):
            ts = list(vals)
            idx = own_outputs[v]
            if v in uses and -1 not in idx and idx:
                part = sum(_nbytes(ts[i]) for i in idx if isinstance(ts[i], torch.Tensor))
                saved_mem = part if part < s["mem"] else None
            first = ts[0] if ts and isinstance(ts[0], torch.Tensor) else None
            if first is not None and first.numel() * first.element_size() != s["mem"]:
                grad_mem = first.numel() * first.element_size()
        g.add_node(v, mem=s["mem"], cost=s["cost"], inputs=inputs, op=s["op"], bwd_uses=uses,
                   grad_alias=_grad_alias(n, owners, s["inputs"]) if s["requires_grad"] else (),
                   requires_grad=s["requires_grad"], saved_mem=saved_mem, grad_mem=grad_mem)
        if s["module"] is not None:
            _set_module(g, v, s["module"])
    if len(g) == 0:
        raise CaptureError(f"{name}'s forward allocates nothing: nothing to plan")
    shared = _shared_grads(weight_reads, seq_owner, g)
    if shared:
        g.shared_grads = shared
    g.validate()
    return JointGraph(gm=gm, num_fwd_outputs=num_fwd_outputs, graph=g, node_of=node_of, owners=owners,
                      group=group, forward=forward, backward=backward,
                      random=frozenset(v for v, n in node_of.items() if is_random(n)), states=states,
                      unmodeled=unmodeled, cost_notes=cost_notes, normalized=normalized,
                      reads_mutated=frozenset(reads_mutated), cost=cost)


def _shared_grads(weight_reads: dict[fx.Node, list[fx.Node]], seq_owner: dict[int, str],
                  g: Graph) -> tuple[tuple[tuple[str, ...], float], ...]:
    """Weights read by several planning nodes, whose backwards each make a part of their gradient
    (``simulate``'s ``graph.shared_grads``): the readers, in forward order, and the weight's bytes.
    Under autocast a weight is read once, by its cast (``castcache``): the cast is a value of the
    graph, and its gradient is counted as any value's."""
    shared = []
    for w, ops in weight_reads.items():
        ids = tuple(dict.fromkeys(r for n in ops if (r := seq_owner.get(n.meta.get("seq_nr"))) is not None
                                  and r in g and g[r].requires_grad))
        if len(ids) > 1:
            shared.append((ids, float(sum(_nbytes(t) for t in _tensors(w.meta.get("val"))))))
    return tuple(shared)


def _tag_untagged(nodes: list[fx.Node]) -> None:
    """Nodes a joint-graph pass added after AOTAutograd tagged the graph (inductor's) get a tag:
    backward if they read anything of the backward, else forward."""
    backward: set[fx.Node] = set()
    for n in nodes:
        if n.op == "placeholder" and is_tangent(n):
            backward.add(n)
        elif n.op == "call_function":
            tag = n.meta.get("partitioner_tag")
            if tag is None:
                tag = "is_backward" if any(a in backward for a in n.all_input_nodes) else "is_forward"
                n.meta["partitioner_tag"] = tag
            if tag == "is_backward":
                backward.add(n)


def module_path(n: fx.Node) -> str | None:
    """The module path an op was traced in: remat's capture annotates it (``MODULE_KEY``);
    under torch.compile, Dynamo's ``nn_module_stack`` has it (``L['model'].model.layers[0]`` ->
    ``model.layers.0``), so per-block plans find the blocks there too."""
    path = (n.meta.get("custom") or {}).get(MODULE_KEY)
    if path is not None:
        return path
    stack = n.meta.get("nn_module_stack")
    if not stack:
        return None
    raw = str(list(stack.values())[-1][0])
    raw = re.sub(r"\._modules\[['\"]([^'\"]*)['\"]\]", r".\1", raw)  # ._modules['layers']
    raw = re.sub(r"^L\[['\"][^'\"]*['\"]\]\.?", "", raw)        # the frame's local: L['self'], L['model']
    raw = re.sub(r"\[['\"]?([\w.]+)['\"]?\]", r".\1", raw)          # layers[0]
    return raw.strip(".") or None


def _set_module(g: Graph, v: str, module: str) -> None:
    """Record the module path a node came from (``Node.module`` where the Graph has the field)."""
    node = g[v]
    if hasattr(node, "module"):
        object.__setattr__(node, "module", module)
    else:
        g.__dict__.setdefault("modules", {})[v] = module


_PASSTHROUGH = {"add.Tensor": (0, 1), "sub.Tensor": (0,), "clone.default": (0,)}
# the generated eager backward writes these ops' gradient over the incoming one (``inplace``)
_OVERWRITTEN = ("_log_softmax.default", "_softmax.default")


def _grad_alias(n: fx.Node, owners: dict[fx.Node, tuple[str, ...]], inputs: tuple[str, ...]) -> list[str]:
    """Inputs whose gradient is this node's own gradient buffer (add, sub's first input, clone, cat;
    a softmax or log-softmax over the last dimension, whose gradient the generated code writes over
    the incoming one)."""
    key = str(n.target).replace("aten.", "")
    out = n.meta.get("val")
    if not isinstance(out, torch.Tensor):
        return []
    if key in ("cat.default", "stack.default"):
        args = [a for a in n.args[0] if isinstance(a, fx.Node)]
    elif key in _OVERWRITTEN and n.args[1] in (-1, out.dim() - 1) and isinstance(n.args[0], fx.Node):
        args = [n.args[0]]
    elif key in _PASSTHROUGH and n.kwargs.get("alpha", 1) == 1:
        args = [n.args[i] for i in _PASSTHROUGH[key] if i < len(n.args) and isinstance(n.args[i], fx.Node)]
    else:
        return []
    keep = []
    for a in args:
        t = a.meta.get("val")
        if not isinstance(t, torch.Tensor) or t.numel() * t.element_size() != _nbytes(t):
            continue
        if key in ("cat.default", "stack.default") or (t.shape == out.shape and t.dtype == out.dtype):
            keep += [o for o in owners.get(a, ()) if o in inputs]
    return list(dict.fromkeys(keep))
