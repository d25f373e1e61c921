"""Coarsening: chains of cheap single-input, single-consumer ops become one planning node.

A captured transformer graph is a third such chains (RMSNorm's pow -> mean -> add -> rsqrt,
dropout's mask -> scale). A planner gains little from deciding inside them: caching the chain's
output serves every reader outside it, and recomputing the chain costs little. So a planning
node is a *group*: a maximal chain u_1 -> u_2 -> ... -> u_k in which each u_i (i < k) is read
only by u_{i+1}, u_{i+1} reads only u_i, and every u_i but the last is cheap (no matmul,
attention or convolution; at most ``cheap_ratio`` cost units per byte). The group is named by
its output u_k, the only member read from outside.

What "exact" means here. Decisions are made per group and mapped back (``expand_kept``,
``expand_stages``); the plan is then lowered and simulated on the *full* graph, so its peak and
recompute cost are exactly those of the schedule that runs (DESIGN.md, "One truth"). A smaller
Graph whose nodes *are* the groups cannot simulate the same in general, and is not built: in
the chain a -> b, the forward step of b holds a and b, and right after it only b, while one
node has one size. For the dp solvers coarsening is a family of lower sets: the pruned family
{L_v} restricted to group outputs v, whose eq. (1) and (2) are those of the full graph.

Tested in tests/test_frontier.py: groups are chains with the stated properties, expanded kept
sets and stages simulate on the full graph as the plan says, and dp on the coarse family
returns valid canonical plans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .graph import Graph

# ops whose cost is matmul-like whatever the cost model says (attention without a flop formula)
EXPENSIVE_OPS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution", "_convolution",
                 "conv", "einsum")
ATTENTION = "attention"


def op_name(op: str | None) -> str:
    """The aten op without its overload: 'mm.default' -> 'mm'."""
    return (op or "").split(".")[0]


def expensive(graph: Graph, v: str, cheap_ratio: float = 2.0) -> bool:
    """Matmul-like: a matmul, attention or convolution op, or over ``cheap_ratio`` cost per byte."""
    n = graph[v]
    name = op_name(n.op)
    if name in EXPENSIVE_OPS or ATTENTION in name or "convolution" in name:
        return True
    return n.cost > cheap_ratio * max(n.mem, 1.0)


@dataclass(frozen=True)
class Coarsening:
    """Groups of a graph (each a chain, in order, named by its last member)."""

    graph: Graph
    groups: dict[str, tuple[str, ...]]   # output id -> members in topological order
    group_of: dict[str, str]             # member id -> output id

    @classmethod
    def of(cls, graph: Graph, cheap_ratio: float = 2.0, layers: bool = False) -> "Coarsening":
        """Maximal chains whose members but the last are cheap (module docstring); with
        ``layers``, whose members but the first are cheap: a layer as seed 000's graphs have it
        (a convolution with its batch norm and ReLU, a matmul with its activation)."""
        nxt: dict[str, str] = {}
        for v in graph.order:
            ws = graph.succ[v]
            if len(ws) != 1 or graph[ws[0]].inputs != (v,):
                continue
            if not expensive(graph, ws[0] if layers else v, cheap_ratio):
                nxt[v] = ws[0]
        heads = set(nxt) - set(nxt.values())
        groups: dict[str, tuple[str, ...]] = {}
        group_of: dict[str, str] = {}
        for v in graph.order:
            if v in group_of:
                continue
            chain = [v]
            if v in heads:
                while chain[-1] in nxt:
                    chain.append(nxt[chain[-1]])
            out = chain[-1]
            groups[out] = tuple(chain)
            for u in chain:
                group_of[u] = out
        return cls(graph, groups, group_of)

    @property
    def outputs(self) -> list[str]:
        """The planning nodes (group outputs), in topological order."""
        return [v for v in self.graph.order if v in self.groups]

    def __len__(self) -> int:
        return len(self.groups)

    def expand_kept(self, kept: Iterable[str]) -> set[str]:
        """Full-graph kept set of group decisions: a kept group keeps its output and whatever of
        its members the backward reads (so it recomputes nothing); a dropped group keeps none."""
        reads = {u for v in self.graph.order for u in self.graph[v].saved}
        out: set[str] = set()
        for g in kept:
            members = self.groups[self.group_of[g]]
            out.add(members[-1])
            out.update(u for u in members[:-1] if u in reads)
        return out

    def expand_stages(self, stages: list[list[str]]) -> list[list[str]]:
        """Stages over group outputs -> stages over all nodes (each group in its output's stage)."""
        return [[u for g in stage for u in self.groups[self.group_of[g]]] for stage in stages]

    def units(self, pos: dict[str, int], sized_free: bool = False) -> list[int]:
        """The groups as bitmasks over topological positions ``pos``, ordered by their first
        member (so each group's inputs lie in earlier ones), with the free nodes (``free_nodes``:
        of size 0, or any size with ``sized_free``) in one unit of their own, first: the units
        ``Poset.lower_sets`` enumerates lower sets over, for dp-exact."""
        free = {v for v in free_nodes(self.graph) if sized_free or self.graph[v].mem == 0}
        out = [sum(1 << pos[u] for u in free)] if free else []
        for members in sorted(self.groups.values(), key=lambda m: pos[m[0]]):
            if members[0] not in free:
                out.append(sum(1 << pos[u] for u in members))
        return out

    def lower_family(self, ancestor_sets: list[int], pos: dict[str, int]) -> list[int]:
        """The pruned family {L_v} (``Poset.ancestor_sets``, indexed by topological position)
        restricted to group outputs v: lower sets that never split a group."""
        return [ancestor_sets[pos[v]] for v in self.outputs]


def free_nodes(graph: Graph) -> list[str]:
    """Isolated nodes: no inputs and no consumers (a BatchNorm's ``num_batches_tracked`` update
    and its buffer on a captured graph, 8 and 0 bytes). One is never in a boundary and its cost
    counts once in eq. (1) wherever it is, so which stage holds it moves eq. (2) by at most
    2 M(v) and not at all when M(v) = 0. dp-exact moves those of size 0 as one unit, since each
    would double the lower sets, and all of them when there are too many lower sets otherwise."""
    return [v for v in graph.order if not graph[v].inputs and not graph.succ[v]]
