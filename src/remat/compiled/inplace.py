"""The generated eager backward writes a softmax's or log-softmax's gradient over the incoming
gradient when that gradient is read for the last time there.

Eager autograd allocates the result next to both inputs; in a language model's loss that is three
vocabulary-sized fp32 buffers at once (the loss gradient, the saved log-probabilities, the result),
24 MiB of a 4-layer Llama's 44 MiB step under bf16 autocast, which no recomputation lowers. The
``out=`` overload of the same ATen op, given the dying input as its output, runs the same kernel:
each row is reduced before any of its elements is written, and each element is read before it is
overwritten, so the values are eager's bit for bit (``tests/test_inplace.py``). Inductor reuses
buffers itself (``codepeak``'s fused walk), so this pass is for fx-generated code only.
"""

from __future__ import annotations

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef

from .codepeak import _storages

aten = torch.ops.aten

# op -> (its out= overload, the name of the out argument)
REUSABLE = {
    aten._log_softmax_backward_data.default: (aten._log_softmax_backward_data.out, "out"),
    aten._softmax_backward_data.default: (aten._softmax_backward_data.out, "grad_input"),
}


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and a.stride() == b.stride()
            and a.is_contiguous() and a.storage_offset() == 0)


def reuse_dying_gradients(gm: fx.GraphModule) -> int:
    """Rewrite each op of ``REUSABLE`` in ``gm`` whose incoming gradient is made in this graph, owns
    its storage alone, is last read there and has the result's layout, to write over it. The node's
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
        grad, val = n.args[0], n.meta.get("val")
        if not (isinstance(grad, fx.Node) and isinstance(grad.meta.get("val"), torch.Tensor)):
            continue
        st = _storages(grad)[0][0]
        if (grad.op != "call_function" or holders.get(st) != [grad] or last_read.get(st) != index[n]
                or not isinstance(val, torch.Tensor) or not _same_layout(grad.meta["val"], val)
                or n.args[1] is grad or n.args[2] not in (-1, val.dim() - 1)):
            continue
        overload, name = REUSABLE[n.target]
        with gm.graph.inserting_before(n):
            new = gm.graph.call_function(overload, n.args, {name: grad})
        new.meta = {**n.meta, "val": grad.meta["val"]}
        n.replace_all_uses_with(new)
        gm.graph.erase_node(n)
        done += 1
    if done:
        gm.recompile()
    return done
