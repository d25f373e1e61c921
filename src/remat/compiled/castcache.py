"""A parameter's gradients summed as eager autocast's cast cache sums them.

Eager autocast casts a parameter (a leaf that requires grad) to the lower precision once per
autocast region and hands the same copy to every op that reads it. A weight read k times (ALBERT's
shared layer, a module called in a loop, an RNN cell over time steps) then has one bf16 copy; its
k gradients meet at that copy's autograd node, are summed there in bf16 in the order they arrive,
and the sum is cast to fp32 once.

AOTAutograd traces with the cache off (``make_fx``: a cast cached by an earlier trace would enter
the graph untracked), so the joint graph casts the weight once per read, and each read's gradient
is cast to fp32 before the k of them are summed: in fp32, so the gradient differs from eager's by
bf16 rounding (ALBERT, bf16 autocast on the CPU: 0.3-0.5% on the shared layer's parameters).

``share_casts`` rewrites the joint graph's backward to eager's: the sum of such a parameter's
gradients (a chain of adds over k fp32 casts) becomes the same chain over the bf16 gradients, cast to
fp32 once. The chain keeps its order, which is the order the gradients arrive in at eager's single
node (each read's cast node ran right after the read's own backward). Only where that is all the
parameter is: read by the casts alone, its gradient made of their k gradients alone; else the graph
is left as traced. The forward keeps its k casts: they copy the same values, and as separate nodes
each layer's is its own to keep or recompute (one cast read by every layer would be live across the
whole forward, and the segment solvers, Chen's and the DP, found no cut points: their least plans
on a four-layer shared block rose from under 70% of the vanilla peak to 88-107%).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

_LOW = (torch.bfloat16, torch.float16)


def _cast_to(n: Any) -> torch.dtype | None:
    """The dtype a cast node casts to (``_to_copy`` with a dtype and nothing else that changes the
    value, or ``convert_element_type``), else None."""
    if not isinstance(n, fx.Node) or n.op != "call_function":
        return None
    if n.target is torch.ops.prims.convert_element_type.default:
        return n.args[1] if len(n.args) > 1 else None
    if n.target is torch.ops.aten._to_copy.default and len(n.args) == 1:
        if set(n.kwargs) - {"dtype", "layout", "device"} or n.kwargs.get("layout", torch.strided) != torch.strided:
            return None
        return n.kwargs.get("dtype")
    return None


def _dtype(n: fx.Node) -> torch.dtype | None:
    val = n.meta.get("val")
    return val.dtype if isinstance(val, torch.Tensor) else None


def _chain(root: fx.Node) -> tuple[list[fx.Node], list[fx.Node]] | None:
    """The leaves of the sum ``root`` is, and its adds, each read only by the next (None when an
    add of it has an alpha or is read elsewhere)."""
    leaves: list[fx.Node] = []
    adds: list[fx.Node] = []

    def visit(n: fx.Node, top: bool) -> bool:
        if n.op == "call_function" and n.target is torch.ops.aten.add.Tensor and (top or len(n.users) == 1):
            if n.kwargs or len(n.args) != 2 or not all(isinstance(a, fx.Node) for a in n.args):
                return False
            if not (visit(n.args[0], False) and visit(n.args[1], False)):
                return False
            adds.append(n)  # after its arguments' adds: in the graph's order
            return True
        leaves.append(n)
        return True

    return (leaves, adds) if visit(root, True) else None


def share_casts(gm: fx.GraphModule, num_fwd_outputs: int) -> int:
    """Rewrite ``gm`` (an AOTAutograd joint graph) so that the gradients of each parameter read
    through several casts to one low precision are summed as eager autocast sums them (module
    docstring). Returns how many parameters were rewritten."""
    from .jointgraph import is_backward, is_tangent

    graph = gm.graph
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    out = next(n for n in reversed(nodes) if n.op == "output")
    primals = [n for n in nodes if n.op == "placeholder" and not is_tangent(n)]
    grads = list(out.args[0])[num_fwd_outputs:]
    done = 0
    for p, grad in zip(primals, grads):
        if not isinstance(grad, fx.Node) or _dtype(p) != torch.float32:
            continue
        casts = list(p.users)
        low = {_cast_to(c) for c in casts}
        if len(casts) < 2 or len(low) != 1 or low.pop() not in _LOW or any(is_backward(c) for c in casts):
            continue
        dtype = _cast_to(casts[0])
        chain = _chain(grad)
        if chain is None:
            continue
        leaves, adds = chain
        if len(leaves) != len(casts) or not all(
                _cast_to(x) == torch.float32 and len(x.users) == 1 and _dtype(x.args[0]) == dtype for x in leaves):
            continue
        first = min(casts, key=order.__getitem__)  # eager's one cast (the casts stay: they copy the same values)
        # the same chain over the bf16 gradients, then one cast: at the last add's place
        made: dict[fx.Node, fx.Node] = {x: x.args[0] for x in leaves}
        for a in adds:
            with graph.inserting_before(a):
                s = graph.call_function(torch.ops.aten.add.Tensor, (made[a.args[0]], made[a.args[1]]))
            s.meta = {**a.meta, "val": made[a.args[0]].meta["val"] + made[a.args[1]].meta["val"]}
            s.meta.pop("tensor_meta", None)
            made[a] = s
        last = made[adds[-1]]
        model = next((x for x in leaves if x.meta.get("seq_nr") == first.meta.get("seq_nr")), leaves[-1])
        with graph.inserting_after(last):
            cast = graph.call_function(model.target, (last, *model.args[1:]), dict(model.kwargs))
        cast.meta = {**model.meta, "val": grad.meta["val"]}
        grad.replace_all_uses_with(cast)
        for a in reversed(adds):
            graph.erase_node(a)
        for x in leaves:
            graph.erase_node(x)
        done += 1
    if done:
        graph.lint()
        gm.recompile()
    return done
