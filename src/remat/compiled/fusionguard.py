"""Inductor's fusions held to the fused walk's peak.

The fused walk (``codepeak``) runs each of inductor's kernels where its first node stands in the
graph, its outputs allocated then and its last-read inputs freed after it. A fusion of two
kernels breaks that where they stand apart or where the first frees what the second's outputs
would have taken: the fused kernel runs where its earliest member stood, so every later member's
output is allocated there, the nodes between run beside it, and what a later member reads from a
node between (a recomputed matmul) is computed first. Measured on the held-out Llama (bf16, CPU):

- at torch.compile b=0.5's peak, a recomputed residual stream (an embedding and every layer's
  residual adds, a chain of pointwise kernels with the layers' matmuls between) fused into one
  kernel at the start of the backward, its four matmuls moved up to it and its 15 outputs
  allocated there: 0.49 MB (3.7%) over the walk, at a matmul of the loss's backward;
- at "50%", the recomputed residual stream fused with the log-softmax backward beside it: its
  three outputs (0.65 MB) allocated while the saved fp32 log-softmax (8 MiB) was still read:
  2.9% over the walk.

A guard per compiled graph (``attach``: the walk's live bytes at each node and its peak) vetoes a
fusion when the fused kernel, and the kernels it runs ahead of, would hold more than that peak:
the later members' outputs, and those of the kernels moved up for them, counted from where the
fused kernel runs to where each stood. Fusions away from the peak are kept, so the code is the
one the walk judged wherever its peak is decided.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch.fx as fx

KEY = "remat_fusion_guard"  # GraphModule.meta key of the guard of a graph remat planned


@dataclass
class Guard:
    """The fused walk of one graph: live bytes while each node runs (by node name) and the peak
    no fusion may raise its code above."""

    live: dict[str, float]
    limit: float
    local: frozenset[str] = frozenset()  # values the walk counts fused into their readers' kernel
    vetoed: int = 0
    _state: dict[int, Any] = field(default_factory=dict, repr=False)

    def __deepcopy__(self, memo: dict) -> "Guard":  # (AOTAutograd copies a backward before compiling it: shared)
        return self

    def __reduce__(self) -> Any:
        """Inductor pickles a graph's meta into its cache key: the guard as stable text (a set of
        strings pickles in an order that changes per process, and no compiled graph would be found again)."""
        return (str, (f"remat.guard:{self.limit!r}:{list(self.live.items())!r}:{sorted(self.local)!r}",))

    def allows(self, scheduler: Any, node1: Any, node2: Any) -> bool:
        """Whether fusing ``node1`` and ``node2`` keeps every kernel within ``limit``."""
        _, live, out, names = self._of(scheduler)
        members = [*node1.get_nodes(), *node2.get_nodes()]
        start = min(m.min_order for m in members)
        end = max(m.max_order for m in members)
        # bytes allocated ahead of where they stood: (from, to, bytes); not those of a fusion the walk
        # counted already (a kernel-local value's kernel and its reader's)
        assumed = self._assumed(node1, node2)
        own = _early([m for m in members if m.get_name() not in assumed], start, out)
        for m in _moved_up(scheduler, members, start, end):
            own.extend(_early(list(m.get_nodes()), start, out, moved=True))
        # the kernels fused before, standing in the range: what they allocate ahead is held there too
        others = [e for group in _fused_within(scheduler, names, start, end, (node1, node2))
                  for e in _early(list(group.get_nodes()), group.min_order, out)]
        mine, held = _spread(own, start, end), _spread(others, start, end)
        for i, add in enumerate(mine):
            walked = live.get(start + i)
            if walked is not None and add > 0 and walked + add + held[i] > self.limit:
                self.vetoed += 1
                return False
        return True

    def _assumed(self, node1: Any, node2: Any) -> set[str]:
        """The members of a fusion the walk took to happen (``codepeak._kernel_local``): a kernel
        making a value the walk counts inside its readers' kernel, and those readers. Vetoing it
        leaves the value a buffer the walk never counted (Bloom's tanh GELU gradient term, 64 KiB,
        8% over the walk at the end of the forward)."""
        if not self.local:
            return set()
        found: set[str] = set()
        for a, b in ((node1, node2), (node2, node1)):
            makers = [m for m in a.get_nodes() if _origins(m) & self.local]
            made = {buf.get_name() for m in makers for buf in m.get_outputs()}
            readers = [m for m in b.get_nodes() if any(d.name in made for d in m.read_writes.reads)]
            if readers:
                found |= {m.get_name() for m in (*makers, *readers)}
        return found

    def joins(self, scheduler: Any, running: list[float] | None, node: Any, late: float) -> bool:
        """Whether kernel ``node`` may run in one C++ function with the kernels before it (inductor's
        CPU code allocates all the function's outputs before it and frees what they read after it).
        ``running``: the bytes while each of those kernels runs (the walk's live bytes plus what the
        function adds there; None: no kernel may join them); ``late``: the bytes they read last,
        freed after the function where the walk frees them after their own kernel. It joins where
        its output, allocated at the function's start, and the late bytes beside it keep every
        kernel within ``limit``; ``running`` then counts it."""
        if running is None:
            return False
        _, live, out, _ = self._of(scheduler)
        members = node.get_nodes()
        seen = [live[m.min_order] for m in members if m.min_order in live]
        if not seen:
            return False
        own = max(seen) + late
        size = sum(out.get(m.min_order, 0.0) for m in members)
        if own > self.limit or any(r + size > self.limit for r in running):
            return False
        running[:] = [r + size for r in running]
        running.append(own)
        return True

    def _of(self, scheduler: Any) -> tuple:
        """(scheduler, live, out, names) of ``_positions``, worked out once per compile."""
        s = self._state.get(id(scheduler))
        if s is None or s[0] is not scheduler:
            s = self._state[id(scheduler)] = (scheduler, *_positions(scheduler, self.live))
        return s


def _positions(scheduler: Any, walked: dict[str, float]) -> tuple[dict, dict, dict]:
    """Per scheduler position (``min_order`` of each unfused node): the walk's live bytes (the
    most over the node's fx origins; absent where none was walked), its outputs' bytes and its name."""
    sizes = _sizes(scheduler)
    live: dict[int, float] = {}
    out: dict[int, float] = {}
    names: dict[int, str] = {}
    for group in scheduler.nodes:
        for m in group.get_nodes():
            seen = [walked[o] for o in _origins(m) if o in walked]
            if seen:
                live[m.min_order] = max(seen)
            names[m.min_order] = m.get_name()
            out[m.min_order] = float(sum(sizes.get(b.get_name(), 0) for b in m.get_outputs()))
    return live, out, names


def _origins(m: Any) -> set[str]:
    """The names of the fx nodes a scheduler node computes."""
    origins = getattr(getattr(m, "node", None), "origins", None) or ()
    return {name for o in origins if (name := getattr(o, "name", None)) is not None}


def _sizes(scheduler: Any) -> dict[str, int]:
    """Bytes each of the scheduler's buffers allocates when it is made (inductor's own account)."""
    from torch._inductor.memory import compute_size_for_scheduler_buffer

    return {name: alloc for name, (alloc, _) in compute_size_for_scheduler_buffer(scheduler.name_to_buf).items()}


def _spread(early: list[tuple[int, int, float]], start: int, end: int) -> list[float]:
    """Bytes held at each position of ``start..end``: each (from, to, bytes) from ``from`` up to
    (not at) ``to``, where the walk already counts them."""
    extra = [0.0] * (end - start + 1)
    for frm, to, b in early:
        for i in range(max(frm, start), min(to, end + 1)):
            extra[i - start] += b
    return extra


def _early(members: list[Any], start: int, out: dict[int, float],
           moved: bool = False) -> list[tuple[int, int, float]]:
    """(from, to, bytes): the outputs of ``members``, fused into a kernel run at ``start``, that are
    allocated there, before their own position (``moved``: every member's)."""
    return [(start, m.min_order, out.get(m.min_order, 0.0)) for m in members if moved or m.min_order > start]


def _fused_within(scheduler: Any, names: dict[int, str], start: int, end: int, besides: tuple) -> list[Any]:
    """The groups of several kernels, other than ``besides``, with a member in ``start..end``
    (``names``: the unfused node at each position)."""
    found: dict[int, Any] = {}
    skip = {id(b) for b in besides}
    for q in range(start, end + 1):
        group = scheduler.name_to_fused_node.get(names.get(q, ""))
        if group is not None and id(group) not in skip and len(group.get_nodes()) > 1:
            found[id(group)] = group
    return list(found.values())


def _moved_up(scheduler: Any, members: list[Any], start: int, end: int) -> list[Any]:
    """The kernels standing between ``start`` and ``end`` that the members read, directly or
    through one another: the fused kernel runs at ``start``, so they run before it."""
    inside = {m.get_name() for m in members}
    found: dict[str, Any] = {}
    todo = list(members)
    while todo:
        node = todo.pop()
        for dep in node.unmet_dependencies:
            buf = scheduler.name_to_buf.get(dep.name)
            if buf is None:
                continue
            op = buf.defining_op_name()
            if op in inside or op in found:
                continue
            group = scheduler.name_to_fused_node.get(op)
            if group is None or not start < group.min_order <= end:
                continue
            found[op] = group
            todo.extend(group.get_nodes())
    unique = {id(g): g for g in found.values()}
    return list(unique.values())


def attach(forward: fx.GraphModule, backward: fx.GraphModule, traces: dict[str, Any], peak: float) -> None:
    """Give each graph the guard of its walk (``codepeak.code_peak``'s ``traces``): no fusion raises
    the step's peak above ``peak``, the predicted one (the backward's walk counts without the
    ``user`` bytes the caller holds)."""
    local = traces.get("local", {})
    forward.meta[KEY] = Guard(dict(traces["forward"]), peak, local.get("forward", frozenset()))
    backward.meta[KEY] = Guard(dict(traces["backward"]), peak - traces["user"], local.get("backward", frozenset()))


@contextlib.contextmanager
def compiling(guard: Guard | None) -> Iterator[None]:
    """A compile judged by ``guard``: what it learnt of the compile's scheduler (positions, sizes,
    the scheduler itself) is dropped when the compile ends, not kept with the graph."""
    try:
        yield
    finally:
        if guard is not None:
            guard._state.clear()


def of(gm: fx.GraphModule) -> Guard | None:
    """The guard of a graph remat planned, if any."""
    return gm.meta.get(KEY)
