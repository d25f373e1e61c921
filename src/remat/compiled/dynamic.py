"""Graphs with dynamic shapes: planned at the sizes of the call that compiled them.

After a second input shape, torch.compile traces again with symbolic sizes (automatic dynamic
shapes: a language model fed batches padded to each batch's longest sequence). Every size in
the joint graph is then a SymInt. The planner needs numbers, and turning a SymInt into an int
(``int(s)``) adds a guard that specializes the graph to the current size: a recompile, and a
plan, for every new length, until Dynamo's recompile limit sends the model back to eager.

So the planner plans on ``hinted(gm)``: a copy of the joint graph whose fake values have the
sizes of the compiling call (each symbol's hint, read without a guard), storages shared as in
the original. The plan's schedule is then split on the symbolic graph (``JointGraph.on``), so
the code runs at every size. Memory scales with the sizes: a percentage of the vanilla peak
holds roughly at every size. A byte budget is a promise about every step, so a graph planned
for one is planned at the top of each size's power-of-two bucket (``tops``: a length of 96 is
planned at 128) and guarded to sizes up to it (``bound``): with the same schedule every value is
no larger at a smaller size, so the peak is no higher, and a larger size fails the guard and
compiles a plan of its own (a recompile per bucket grown into, not per length).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef

SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)
ORIGIN = "remat.hinted_from"   # a hinted copy's ``meta`` key: (the symbolic graph, the sizes)


def _symbolic(x: Any) -> bool:
    if isinstance(x, SYM_TYPES):
        return True
    if isinstance(x, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride(), x.storage_offset()))
    return False


def is_dynamic(gm: fx.GraphModule) -> bool:
    """Whether any value of ``gm`` has a symbolic size (or is a symbolic scalar); a joint graph's
    values are its nodes' ``val``, a dynamo graph's their ``example_value``."""
    return any(_symbolic(x) for n in gm.graph.nodes
               for x in pytree.tree_leaves(n.meta.get("val", n.meta.get("example_value"))))


def is_symbolic(n: fx.Node) -> bool:
    """Whether ``n`` is a size (a SymInt, SymFloat or SymBool of a dynamic-shape graph; a plain
    number in its hinted copy, ``hinted``)."""
    return n.op != "get_attr" and isinstance(n.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool,
                                                                 int, float, bool))


def hint(x: Any) -> Any:
    """A symbolic scalar's value at the compiling call's sizes, read without adding a guard."""
    if type(x) is int:  # (most sizes: the walks ask for every storage's)
        return x
    for kind, cast in ((torch.SymInt, int), (torch.SymFloat, float), (torch.SymBool, bool)):
        if isinstance(x, kind):
            return cast(_node_hint(x.node))
    return x


def _node_hint(node: Any) -> Any:
    """A symbolic node's hint; ``optimization_hint`` where torch has it (2.13), ``size_hint`` before."""
    if node.hint is not None:
        return node.hint
    env = node.shape_env
    return env.optimization_hint(node.expr) if hasattr(env, "optimization_hint") else env.size_hint(node.expr)


def _input_sizes(gm: fx.GraphModule) -> dict[str, torch.SymInt]:
    """Each symbolic size of ``gm``'s inputs (by its expression), first occurrence."""
    found: dict[str, torch.SymInt] = {}
    for n in gm.graph.find_nodes(op="placeholder"):
        for x in pytree.tree_leaves(n.meta.get("val")):
            sizes = x.shape if isinstance(x, torch.Tensor) else (x,) if isinstance(x, torch.SymInt) else ()
            for s in sizes:
                if isinstance(s, torch.SymInt) and not s.node.expr.is_number:
                    found.setdefault(str(s.node.expr), s)
    return found


def symbols(gm: fx.GraphModule) -> dict[str, int]:
    """Each size symbol of ``gm``'s inputs and its value at the compiling call (for the notes)."""
    return {name: hint(s) for name, s in _input_sizes(gm).items()}


def tops(gm: fx.GraphModule) -> dict[str, int]:
    """Each size symbol of ``gm``'s inputs (a bare symbol: a compound size follows from them) and
    the top of its power-of-two bucket at the compiling call: 96 -> 128, 128 -> 128."""
    return {name: 1 << (hint(s) - 1).bit_length() for name, s in _input_sizes(gm).items()
            if s.node.expr.is_symbol}


def bound(gm: fx.GraphModule, at: dict[str, int]) -> None:
    """Guard ``gm`` to sizes up to ``at`` (symbol -> largest size): a larger size fails the guard
    and torch.compile compiles it again. (A comparison of a SymInt read as a bool is a guard; the
    compiling call's sizes pass it.)"""
    for name, s in _input_sizes(gm).items():
        if name in at and not bool(s <= at[name]):
            raise AssertionError(f"remat: {name}={hint(s)} is above {at[name]}, the size it was to be bound to")


def value(x: Any, at: dict[str, int]) -> Any:
    """A symbolic scalar's value with the symbols of ``at`` at those sizes (others at the
    compiling call's; no guard). Plain values, and ``at`` empty: ``hint``."""
    if not at or not isinstance(x, SYM_TYPES):
        return hint(x)
    expr, env = x.node.expr, x.node.shape_env
    if not any(str(s) in at for s in expr.free_symbols):
        return hint(x)
    known = getattr(env, "backed_var_to_val", None)
    known = env.var_to_val if known is None else known  # (the name before torch 2.13)
    subs = {}
    for s in expr.free_symbols:
        v = at.get(str(s), known.get(s))
        if v is None:  # (a size from data: its hint)
            return hint(x)
        subs[s] = v
    got = expr.xreplace(subs)
    return int(got) if isinstance(x, torch.SymInt) else float(got) if isinstance(x, torch.SymFloat) else bool(got)


def hinted(gm: fx.GraphModule, at: dict[str, int] | None = None) -> fx.GraphModule:
    """A copy of ``gm`` (same node names and metadata) whose fake values have the compiling
    call's sizes, or those of ``at`` for its symbols (``value``): views of one storage stay views
    of one storage."""
    at = at or {}
    from torch._subclasses.fake_tensor import FakeTensorMode

    copy = _copy(gm)
    copy.meta[ORIGIN] = (gm, dict(at))
    bases: dict[StorageWeakRef, torch.Tensor] = {}

    def concrete(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return value(x, at)
        ref = StorageWeakRef(x.untyped_storage())
        # in the graph's own fake mode (active while AOTAutograd partitions): static sizes in it
        mode = getattr(x, "fake_mode", None) or FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            if ref not in bases:
                nbytes = value(x.untyped_storage().nbytes(), at)
                bases[ref] = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
            out = torch.empty(0, dtype=x.dtype, device=x.device)
            out.set_(bases[ref].untyped_storage(), value(x.storage_offset(), at), [value(s, at) for s in x.shape],
                     [value(s, at) for s in x.stride()])
        return out

    for n in copy.graph.nodes:
        if "val" in n.meta:
            n.meta["val"] = pytree.tree_map(concrete, n.meta["val"])
    return copy


def origin(gm: fx.GraphModule) -> tuple[fx.GraphModule, dict[str, int]] | None:
    """The symbolic graph ``gm`` is a ``hinted`` copy of (a fresh copy of it), and the sizes it
    was hinted at; None for any other graph. (What needs symbolic sizes, inductor's own
    partitioner, runs on the original.)"""
    got = getattr(gm, "meta", {}).get(ORIGIN)
    return None if got is None else (_copy(got[0]), got[1])


def _copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm``: its nodes' names and metadata, another graph."""
    graph = fx.Graph()
    out = graph.output(graph.graph_copy(gm.graph, {}))  # (graph_copy leaves the output node out)
    out.meta = dict(gm.graph.output_node().meta)
    return fx.GraphModule(gm, graph)
