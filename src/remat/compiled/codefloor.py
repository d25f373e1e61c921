"""A peak no plan's generated eager code goes below, read off the split that saves everything.

Whatever a plan recomputes, the generated backward runs the joint graph's backward ops in the same
order (``split``), so the gradients (and the loss's tangents) live while each op runs are the
same for every plan, and the op's own forward inputs must be there too, saved or recomputed. The
most, over the backward's ops, of those bytes is a floor for every plan's code peak (``codepeak``):
a budget below it can be refused, or planned at it, without a search over plans that cannot fit.

On a language model with tied embeddings it is the two vocabulary-sized weight gradients (the
output projection's and the embedding's) being added: HF GPT-2 at its public size, two sequences
of 128 tokens, holds 295 MiB there, 56% of the vanilla step, which no recomputation lowers; a
"50%" budget was searched for four minutes before it was refused.

Eager code only: under inductor values are fused away and written over, and a value the walk
counts here may take no buffer there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from .codepeak import SCALAR_BYTES, _is_view, _storages, _walk
from .jointgraph import is_tangent


@dataclass(frozen=True)
class CodeFloor:
    peak: float   # bytes: every plan's code peaks at least this high
    op: str       # the backward op it is reached at
    grads: float  # of ``peak``, the gradients and tangents live there (with the op's output)
    reads: float  # of ``peak``, the forward values the op reads
    summed: bool = False  # its output is added into a parameter's gradient (a weight used twice: tied embeddings)

    def why(self) -> str:
        """Where the floor is reached, for notes and refusals."""
        from ..budget import fmt_bytes

        return (f"the backward's {self.op} runs with {fmt_bytes(self.grads)} of gradients live and reads "
                f"{fmt_bytes(self.reads)} of forward values" + (
                    ": it makes one part of a gradient summed from a weight's several uses (tied embeddings), "
                    "held until the other parts are added" if self.summed else ""))


def code_floor(forward: fx.GraphModule, backward: fx.GraphModule, num_fwd_outputs: int,
               unused: frozenset[str] = frozenset(), held_grads: bool = False) -> CodeFloor:
    """The floor (see the module docstring) from the two graphs of the plan that recomputes
    nothing. ``unused``: tangents that arrive as None (``tangents``); ``held_grads``: returned
    gradients held to the backward's end (``codepeak``). The walk counts as
    ``codepeak`` does, but without the saved values: each op adds the ones it reads, once per
    storage, but those of parameters and inputs, which are not the step's; and the loss the
    caller holds through the backward."""
    before = {ref for p in forward.graph.find_nodes(op="placeholder") for ref, _ in _storages(p)}
    outputs = next(iter(forward.graph.find_nodes(op="output"))).args[0][:num_fwd_outputs]
    user = float(sum({ref: size for a in outputs if isinstance(a, fx.Node) for ref, size in _storages(a)
                      if ref not in before and size <= SCALAR_BYTES}.values()))
    held: dict[object, int] = {}
    saved: dict[object, int] = {}
    for p in backward.graph.find_nodes(op="placeholder"):
        for j, (ref, size) in enumerate(_storages(p)):
            if is_tangent(p):
                if p.name not in unused:
                    held[(p, j)] = size
            elif ref not in before:
                saved[ref] = size
    out = next(iter(backward.graph.find_nodes(op="output")))
    grads = {a for a in pytree.tree_leaves(out.args) if isinstance(a, fx.Node)}
    returned = frozenset() if held_grads else frozenset(ref for a in grads for ref, _ in _storages(a))
    # (a returned copy is not counted: lower)
    trace: list[tuple[str, float]] = []
    _walk(backward.graph, held, grads, returned, trace=trace)
    live = dict(trace)
    best = CodeFloor(user, "", 0.0, 0.0)
    for n in backward.graph.nodes:
        if n.name not in live:
            continue
        refs = {ref for a in n.all_input_nodes for ref, _ in _storages(a) if ref in saved}
        reads = float(sum(saved[r] for r in refs))
        if user + live[n.name] + reads > best.peak:
            summed = _summed_into(n, grads)
            best = CodeFloor(user + live[n.name] + reads, n.name, live[n.name], reads, summed)
    return best


def _summed_into(n: fx.Node, grads: set[fx.Node]) -> bool:
    """Whether ``n`` (through views) is added into a gradient the backward returns."""
    users = list(n.users)
    while users:
        u = users.pop()
        if _is_view(u):
            users += list(u.users)
        elif u.target is torch.ops.aten.add.Tensor and u in grads:
            return True
    return False
