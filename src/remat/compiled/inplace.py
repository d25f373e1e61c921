"""The generated eager code writes a softmax or log-softmax, and their gradients, over their first
input when that input is read for the last time there.

Eager autograd allocates each result next to its inputs. In a language model's loss that means
vocabulary-sized fp32 buffers side by side: under bf16 autocast the fp32 copy of the logits and the
log-probabilities made from it in the forward; the loss gradient, the saved log-probabilities and
their gradient in the backward (24 MiB of a 4-layer Llama's 44 MiB step), which no recomputation
lowers. The ``out=`` overload of the same ATen op, given the dying input as its output, runs the
same kernel: each row is reduced before any of its elements is written, and each element is read
before it is overwritten, so the values are eager's bit for bit (``tests/test_inplace.py``).
Inductor reuses buffers itself (``codepeak``'s fused walk), so this pass is for fx-generated code.
"""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef

from .codepeak import _storages

aten = torch.ops.aten

# op -> (its out= overload, the name of the out argument, the position of its dim argument)
REUSABLE = {
    aten._log_softmax.default: (aten._log_softmax.out, "out", 1),
    aten._softmax.default: (aten._softmax.out, "out", 1),
    aten._log_softmax_backward_data.default: (aten._log_softmax_backward_data.out, "out", 2),
    aten._softmax_backward_data.default: (aten._softmax_backward_data.out, "grad_input", 2),
}


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and a.stride() == b.stride()
            and a.is_contiguous() and a.storage_offset() == 0)


def write_over_dying_inputs(gm: fx.GraphModule) -> int:
    """Rewrite each op of ``REUSABLE`` in ``gm`` whose first input is made in this graph (its storage
    is no input's), is read there for the last time, through any view, and has the result's
    layout, to write over it. The node's
    value then shares that storage, as the code-peak walk reads it. Returns the ops rewritten."""
    nodes = list(gm.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    holders: dict[StorageWeakRef, list[fx.Node]] = {}
    last_read: dict[StorageWeakRef, int] = {}
    for n in nodes:
        for st, _ in _storages(n):
            holders.setdefault(st, []).append(n)
        for a in n.all_input_nodes:
            for sa, _ in _storages(a):
                last_read[sa] = max(last_read.get(sa, -1), index[n])
    done = 0
    for n in nodes:
        if n.op != "call_function" or n.target not in REUSABLE or n.kwargs:
            continue
        overload, name, dim = REUSABLE[n.target]
        first, val = n.args[0], n.meta.get("val")
        if not (isinstance(first, fx.Node) and isinstance(first.meta.get("val"), torch.Tensor)):
            continue
        st = _storages(first)[0][0]
        if (any(h.op != "call_function" for h in holders.get(st, [first])) or last_read.get(st) != index[n]
                or not isinstance(val, torch.Tensor) or not _same_layout(first.meta["val"], val)
                or first in n.args[1:] or n.args[dim] not in (-1, val.dim() - 1)):
            continue
        with gm.graph.inserting_before(n):
            new = gm.graph.call_function(overload, n.args, {name: first})
        new.meta = {**n.meta, "val": first.meta["val"]}
        old = StorageWeakRef(val.untyped_storage())
        _rebase([m for m in holders.get(old, ()) if index[m] > index[n]], old, first.meta["val"])
        n.replace_all_uses_with(new)
        gm.graph.erase_node(n)
        done += 1
    if done:
        gm.recompile()
    return done


def _rebase(nodes: list[fx.Node], old: StorageWeakRef, base: torch.Tensor) -> None:
    """Views of the rewritten op's result (a ``detach`` the backward saves) are views of ``base``
    now: their recorded values are remade over its storage, as the code-peak walk tells storages
    apart by them. ``nodes``: those whose values hold ``old`` (not every later node: a tiny
    Bloom's planning spent a quarter of its time remaking values that hold other storages)."""
    def remake(t: object) -> object:
        if isinstance(t, torch.Tensor) and StorageWeakRef(t.untyped_storage()) == old:
            return base.as_strided(t.size(), t.stride(), t.storage_offset())
        return t

    for m in nodes:
        if "val" in m.meta:
            m.meta["val"] = pytree.tree_map(remake, m.meta["val"])
