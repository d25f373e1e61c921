"""Graphs with dynamic shapes: planned at the sizes of the call that compiled them.

After a second input shape, torch.compile traces again with symbolic sizes (automatic dynamic
shapes: a language model fed batches padded to each batch's longest sequence). Every size in
the joint graph is then a SymInt. The planner needs numbers, and turning a SymInt into an int
(``int(s)``) adds a guard that specializes the graph to the current size: a recompile, and a
plan, for every new length, until Dynamo's recompile limit sends the model back to eager.

So the planner plans on ``hinted(gm)``: a copy of the joint graph whose fake values have the
sizes of the compiling call (each symbol's hint, read without a guard), storages shared as in
the original. The plan's schedule is then split on the symbolic graph (``JointGraph.on``), so
the code runs at every size. Memory scales with the sizes: a byte budget holds at the sizes
planned for; a percentage of the vanilla peak roughly at every size.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef

SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _symbolic(x: Any) -> bool:
    if isinstance(x, SYM_TYPES):
        return True
    if isinstance(x, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride(), x.storage_offset()))
    return False


def is_dynamic(gm: fx.GraphModule) -> bool:
    """Whether any value of ``gm`` has a symbolic size (or is a symbolic scalar)."""
    return any(_symbolic(x) for n in gm.graph.nodes for x in pytree.tree_leaves(n.meta.get("val")))


def is_symbolic(n: fx.Node) -> bool:
    """Whether ``n`` is a size (a SymInt, SymFloat or SymBool of a dynamic-shape graph; a plain
    number in its hinted copy, ``hinted``)."""
    return n.op != "get_attr" and isinstance(n.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool,
                                                                 int, float, bool))


def hint(x: Any) -> Any:
    """A symbolic scalar's value at the compiling call's sizes, read without adding a guard."""
    if type(x) is int:  # (most sizes: the walks ask for every storage's)
        return x
    if isinstance(x, torch.SymInt):
        from torch.fx.experimental.symbolic_shapes import optimization_hint

        return optimization_hint(x)
    if isinstance(x, torch.SymFloat):
        return float(x.node.hint) if x.node.hint is not None else float(x.node.shape_env.optimization_hint(x.node.expr))
    if isinstance(x, torch.SymBool):
        return bool(x.node.hint) if x.node.hint is not None else bool(x.node.shape_env.optimization_hint(x.node.expr))
    return x


def symbols(gm: fx.GraphModule) -> dict[str, int]:
    """Each size symbol of ``gm``'s inputs and its value at the compiling call (for the notes)."""
    found: dict[str, int] = {}
    for n in gm.graph.find_nodes(op="placeholder"):
        for x in pytree.tree_leaves(n.meta.get("val")):
            sizes = x.shape if isinstance(x, torch.Tensor) else (x,) if isinstance(x, torch.SymInt) else ()
            for s in sizes:
                if isinstance(s, torch.SymInt) and not s.node.expr.is_number:
                    found.setdefault(str(s.node.expr), hint(s))
    return found


def hinted(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` (same node names and metadata) whose fake values have the compiling
    call's sizes: views of one storage stay views of one storage."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    graph = fx.Graph()
    out = graph.output(graph.graph_copy(gm.graph, {}))  # (graph_copy leaves the output node out)
    out.meta = dict(gm.graph.output_node().meta)
    bases: dict[StorageWeakRef, torch.Tensor] = {}

    def concrete(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return hint(x)
        ref = StorageWeakRef(x.untyped_storage())
        # in the graph's own fake mode (active while AOTAutograd partitions): static sizes in it
        mode = getattr(x, "fake_mode", None) or FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            if ref not in bases:
                nbytes = hint(x.untyped_storage().nbytes())
                bases[ref] = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
            out = torch.empty(0, dtype=x.dtype, device=x.device)
            out.set_(bases[ref].untyped_storage(), hint(x.storage_offset()), [hint(s) for s in x.shape],
                     [hint(s) for s in x.stride()])
        return out

    for n in graph.nodes:
        if "val" in n.meta:
            n.meta["val"] = pytree.tree_map(concrete, n.meta["val"])
    return fx.GraphModule(gm, graph)
