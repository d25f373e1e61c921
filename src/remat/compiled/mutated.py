"""Graph inputs a training step writes into, and the ops that read their data from before.

A forward that mutates an input (``x.mul_(2)``, a buffer's update) is traced functionalized: ops
on the old data, and a ``copy_`` of the result into the input at the end of the graph
(AOTAutograd's ``keep_inference_input_mutations``, ``functionalize``'s write-backs). By the
backward the input holds the new data, so a value computed from its old data cannot be
recomputed there: a plan that recomputed ``x * 2`` from an input ``x`` the forward doubled in
place trained on ``4 x``. Such values are pinned (kept) by the planners of both executors.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .batchnorm import BN_FUNCTIONAL

COPY = torch.ops.aten.copy_.default


def mutated_inputs(nodes: list[fx.Node]) -> set[fx.Node]:
    """The graph inputs the step writes into (the targets of its trailing ``copy_`` ops)."""
    return {c.args[0] for c in nodes if c.op == "call_function" and c.target is COPY
            and isinstance(c.args[0], fx.Node) and c.args[0].op == "placeholder"}


def reads_old_data(n: fx.Node, mutated: set[fx.Node]) -> bool:
    """Whether ``n``'s result depends on the data, from before the write, of a node in
    ``mutated`` (inputs the step writes into, and views of them). Not: a training batch norm's
    running statistics (read only to be updated), and an update whose every reader writes it
    back (``num_batches_tracked + 1``)."""
    skip = {3, 4} if n.target is BN_FUNCTIONAL and len(n.args) > 5 and n.args[5] is True else set()
    if not any(a in mutated for i, a in enumerate(n.args) if i not in skip and isinstance(a, fx.Node)) and \
            not any(a in mutated for a in n.kwargs.values() if isinstance(a, fx.Node)):
        return False
    return not (n.users and all(u.target is COPY and u.args[1] is n for u in n.users))
