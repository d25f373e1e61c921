"""``blocks`` and ``blocks-selective``: per-block checkpointing as a plan.

What users write by hand (``torch.utils.checkpoint`` around each transformer layer), planned and
judged like every other solver. A *block* is one child of the model's repeated submodule: of
the module paths captured on the nodes (``Node.module``), the prefix followed by an integer
index with the most distinct indices (``model.layers`` with ``model.layers.0`` ...
``model.layers.31``). A checkpointed block keeps only its outputs (its values read outside it);
its inputs are kept because they are values outside it or outputs of an earlier block, and
everything else in it is recomputed in the backward from them (``schedule.from_kept``,
lazily: each backward step recomputes what it reads).

Values outside the blocks (embeddings, position ids, an attention mask built once and read by
every block, the final norm, a dropout mask) are kept as the model's own backward keeps them,
or, in the *trimmed* variant, recomputed too where that costs no matmul (``trim_outside``):
such a value is then only in memory from its recomputation (in the backward of the last block
or step that reads it) on, not through the loss's backward, which is where a transformer's
step peaks (logits, their gradient and the log-softmax's). Both variants are simulated at each
number of checkpointed blocks; the solver takes the cheaper one that fits the budget (with
``budget=None``, the lower peak), so trimming only ever lowers the peak it is chosen for. On
transformers' GPT-2 (4 x 128, batch 4 x 128 tokens, default dropout) the untrimmed plan peaks
105,888 bytes (0.4%) above ``gradient_checkpointing_enable()``: at the loss's backward it holds
the causal mask the traced model materializes (64 KiB; eager transformers passes
``is_causal`` to SDPA instead) and a generator state per dropout, three per block, where
``torch.utils.checkpoint`` saves one per block (8 x 5056 bytes more). The embedding dropout's
mask, the first block's input and the final norm's output, which both keep, make up the rest
of what lies outside the blocks; trimmed, the plan recomputes all of those and peaks 2.8%
below transformers' (Llama: 0.2% above untrimmed, the causal mask; 3.0% below trimmed).

- ``blocks``: the classic plan. With a budget, the fewest blocks that fit are checkpointed,
  first blocks first: they are recomputed last in the backward, when little else is live, so
  they add the least to the peak. With ``budget=None`` every block is checkpointed.
- ``blocks-selective``: the same, but a checkpointed block also keeps its matmul, attention and
  convolution outputs (``coarsen.expensive``), recomputing only the cheap ops between them.

Graphs without module paths (abstract graphs, captures that do not record them) are refused
with ValueError; ``auto`` skips the solver then. ``plan.peak`` is the simulated peak of the
schedule the runtime executes (``selective.executed``).

Tested in tests/test_frontier.py on graphs with module paths: block discovery, which values a
checkpointed block keeps, trimming, and the budget search; tests/test_blocks_peak.py measures
the plan against transformers' own per-block checkpointing on a small GPT-2.
"""

from __future__ import annotations

import time
from collections import defaultdict

from ..errors import SolverError
from ..coarsen import expensive
from ..graph import Graph
from ..plan import Plan
from ..schedule import _closure_missing
from . import register
from .common import within
from .selective import backward_reads, executed, pinned


def module_of(graph: Graph, v: str) -> str | None:
    """The module path of node v (``Node.module``, or a capture's ``graph.modules`` map)."""
    m = graph[v].module
    return m if m is not None else (getattr(graph, "modules", None) or {}).get(v)


def find_blocks(graph: Graph) -> tuple[str, list[str], dict[str, str]]:
    """The repeated submodule's prefix, its blocks in forward order, and each node's block.

    Raises ValueError when no node has a module path, or no prefix repeats with two indices.
    """
    indices: dict[str, set[str]] = defaultdict(set)
    covered: dict[str, int] = defaultdict(int)
    paths = {v: module_of(graph, v) for v in graph.order}
    for path in paths.values():
        if not path:
            continue
        parts = path.split(".")
        for i, part in enumerate(parts):
            if part.isdigit() and i > 0:
                prefix = ".".join(parts[:i])
                indices[prefix].add(part)
                covered[prefix] += 1
    if not any(paths.values()):
        raise SolverError("blocks: the graph has no module paths (Node.module): capture one with module "
                          "information, or use another solver")
    repeated = [p for p in indices if len(indices[p]) >= 2]
    if not repeated:
        raise SolverError("blocks: no repeated submodule (a module list such as model.layers.0, "
                          "model.layers.1, ...) among the graph's module paths")
    prefix = max(repeated, key=lambda p: (len(indices[p]), covered[p], -len(p)))
    block_of: dict[str, str] = {}
    first: dict[str, int] = {}
    for k, v in enumerate(graph.order):
        path = paths[v]
        if path and path.startswith(prefix + "."):
            index = path[len(prefix) + 1:].split(".")[0]
            if index.isdigit():
                block = f"{prefix}.{index}"
                block_of[v] = block
                first.setdefault(block, k)
    blocks = sorted(first, key=first.__getitem__)
    return prefix, blocks, block_of


def block_kept(graph: Graph, block_of: dict[str, str], checkpointed: set[str],
               keep_expensive: bool = False) -> set[str]:
    """Kept set with ``checkpointed`` blocks keeping only their outputs (and, with
    ``keep_expensive``, their matmul-like values); every other value is kept."""
    kept = set()
    for v in graph.order:
        b = block_of.get(v)
        if b not in checkpointed:
            kept.add(v)
        elif any(block_of.get(w) != b for w in graph.succ[v]) or not graph.succ[v]:
            kept.add(v)   # read outside its block (or a graph output)
        elif keep_expensive and expensive(graph, v):
            kept.add(v)
    # only what is read again: by a backward step, or by the recomputation of a dropped value
    reads = backward_reads(graph)
    return {v for v in kept if v in reads or any(w not in kept for w in graph.succ[v])}


def trim_outside(graph: Graph, kept: set[str], block_of: dict[str, str]) -> tuple[set[str], list[str]]:
    """``kept`` less the values outside every block that can be recomputed without a matmul.

    In forward order, a kept value outside the blocks (not a graph output, not pinned, not
    ``coarsen.expensive``) is dropped when the values its recomputation needs that are not kept
    (``schedule.from_kept``'s closure back to kept values) are all cheap and outside the blocks
    too: a dropout mask from its generator state, position ids and a causal mask from
    ``arange``, a block input from the embeddings, the final norm's output from the last
    block's. Returns the trimmed kept set and the values dropped, in order."""
    fixed = pinned(graph)
    kept = set(kept)
    dropped = []
    for v in graph.order:
        if (v not in kept or v in block_of or v in fixed or not graph.succ[v] or expensive(graph, v)):
            continue
        trial = kept - {v}
        needs = _closure_missing(graph, [v], trial | fixed)
        if any(u in block_of or expensive(graph, u) for u in needs):
            continue
        kept = trial
        dropped.append(v)
    return kept, dropped


def _solve(graph: Graph, budget: float | None, name: str, keep_expensive: bool, mode: str | None,
           time_limit: float | None) -> Plan:
    started = time.perf_counter()
    deadline = started + time_limit if time_limit is not None else float("inf")
    prefix, blocks, block_of = find_blocks(graph)
    cache: dict[int, list[tuple]] = {}

    def at(k: int) -> list[tuple]:
        """The plans with the first k blocks checkpointed: (kept, steps, simulation, trimmed
        values), untrimmed first; the trimmed one only when trimming drops something."""
        if k not in cache:
            kept = block_kept(graph, block_of, set(blocks[:k]), keep_expensive)
            cache[k] = [(kept, *executed(graph, kept), [])]
            trimmed, dropped = trim_outside(graph, kept, block_of)
            if dropped:
                cache[k].append((trimmed, *executed(graph, trimmed), dropped))
        return cache[k]

    def fits(k: int) -> bool:
        return any(within(sim.peak, budget) for _, _, sim, _ in at(k))

    stats: dict = {"prefix": prefix, "blocks": len(blocks)}
    k = len(blocks)
    if budget is not None and fits(len(blocks)):
        lo, hi = -1, len(blocks)  # least k whose plan fits: at(hi) fits, at(lo) does not
        while hi - lo > 1:
            if time.perf_counter() > deadline:
                stats["cut_short"] = f"search over the number of blocks stopped at the time limit ({hi} checkpointed)"
                break
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid
        k = hi
    options = at(k)
    fitting = [o for o in options if budget is not None and within(o[2].peak, budget)]
    if fitting:  # the cheaper plan that fits (the untrimmed one on a tie)
        kept, steps, sim, dropped = min(fitting, key=lambda o: (o[2].recompute_cost, o[2].peak))
    else:        # no budget (or none fits): the lower peak
        kept, steps, sim, dropped = min(options, key=lambda o: (o[2].peak, o[2].recompute_cost))
    stats.update(checkpointed=k, simulated_peak=sim.peak, trimmed=list(dropped))
    feasible = within(sim.peak, budget)
    return Plan(solver=name, budget=budget, feasible=feasible, schedule=steps,
                kept=[v for v in graph.order if v in kept], peak=sim.peak, recompute_cost=sim.recompute_cost,
                solve_seconds=time.perf_counter() - started, mode=mode, stats=stats,
                status="ok" if feasible else "infeasible",
                message="" if feasible else f"checkpointing every block peaks at {sim.peak:g}, above the budget")


def _min_budget(graph: Graph, keep_expensive: bool = False) -> float:
    """The peak with every block checkpointed (trimmed or not, the lower): the least budget the
    solver meets."""
    _, blocks, block_of = find_blocks(graph)
    kept = block_kept(graph, block_of, set(blocks), keep_expensive)
    peak = executed(graph, kept)[1].peak
    trimmed, dropped = trim_outside(graph, kept, block_of)
    return min(peak, executed(graph, trimmed)[1].peak) if dropped else peak


@register("blocks", min_budget=lambda g, **o: _min_budget(g))
def solve(graph: Graph, budget: float | None = None, mode: str = "time", time_limit: float | None = None,
          **options) -> Plan:
    """Per-block checkpointing: recompute whole repeated blocks (the fewest that fit)."""
    return _solve(graph, budget, "blocks", False, mode, time_limit)


@register("blocks-selective", min_budget=lambda g, **o: _min_budget(g, keep_expensive=True))
def solve_selective(graph: Graph, budget: float | None = None, mode: str = "time",
                    time_limit: float | None = None, **options) -> Plan:
    """Per-block checkpointing that also keeps each block's matmul and attention outputs."""
    return _solve(graph, budget, "blocks-selective", True, mode, time_limit)
