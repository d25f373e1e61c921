"""What a plan's recomputation costs in inductor's code, where most of it runs inside fused kernels.

The planning graph prices each op alone (``costs``: the roofline reads every input and writes the
output). Inductor fuses a recomputed pointwise op or reduction into the backward kernel that reads
it: its elements are computed again, but nothing is stored or reloaded, unless an extern kernel
(a matmul, a convolution, attention) needs the value in memory. So, per recomputation:

- an extern op: its own cost, as planned (timed or roofline);
- a fusible op (``JointGraph.fusible``): its arithmetic (FLOPs / peak), plus writing its output
  (bytes / bandwidth) when an op of the executed code that reads it is extern.

Measured on the CPU (held-out models, one thread, in-process interleaved steps against
torch.compile at budget 1.0): the unfused roofline put GPT-2's (fp32) recomputation at 5.5-13.5 ms
and Llama's (bf16) at 7.5-10.8 ms, where the steps took 1-3 ms and 2-7 ms more; this model says
0.3-4.0 ms and 4.5-7.6 ms, and the steps came out within 0.97-1.03x of the prediction (the
unfused one: 0.89-0.97x).

Where two partitions of one joint graph are weighed (remat's plan against inductor's own), what
each saves costs too: the forward writes every saved value and the backward reads it back
(``saved_seconds``), where a value recomputed inside a fused kernel is neither written nor read.
On the CPU (HF Llama bf16 at torch.compile b=1's peak, one thread) remat's plan recomputed 0.174 ms
against the partition's 0.255 ms but saved 3.8 MB more; the partition's step ran 0.919x
torch.compile's, remat's plan 0.964x (0.984x / 1.005x in an earlier run; ``bench/results/saved_traffic_cpu``).

It predicts; the planner still prices ops unfused. Planning with these prices was tried (a fusible
op taken as stored when any op reading it is extern): on Llama (bf16, 50%) the plan recomputed the
same eleven matmuls; on GPT-2 (fp32) at two budgets the steps moved 0.997 -> 1.031x and 1.023 ->
0.976x of torch.compile's, which this machine cannot tell from noise.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

import torch
import torch.fx as fx

from . import costs


def _readers(n: fx.Node) -> list[fx.Node]:
    """The ops that read ``n``'s storage: its users, through getitem and views."""
    from .codepeak import _is_view

    out = []
    for u in n.users:
        out += _readers(u) if u.op == "call_function" and _is_view(u) else [u]
    return out


def _bytes(n: fx.Node) -> int:
    return sum(t.numel() * t.element_size() for t in costs._tensors(n.meta.get("val")))


def recomputations(steps: Iterable[tuple[str, str]]) -> Counter:
    """Planning id -> how many times an executed schedule computes it again after its first time."""
    runs = Counter(v for kind, v in steps if kind == "fwd")
    return Counter({v: c - 1 for v, c in runs.items() if c > 1})


def _figures(jg: Any, device: Any, figures: dict[str, float] | None) -> dict[str, float]:
    """``figures``, else ``device``'s roofline figures, else those of the device ``jg``'s values live on."""
    if figures is not None:
        return figures
    if device is None:
        device = next(filter(None, map(costs.node_device, jg.node_of.values())), None)
    return costs.device_figures(device)


def saved_seconds(jg: Any, saved: float, device: Any = None, figures: dict[str, float] | None = None) -> float:
    """Seconds of moving ``saved`` bytes from the forward to the backward: written once, read once."""
    return 2 * saved / _figures(jg, device, figures)["bandwidth"]


def recompute_seconds(jg: Any, again: Counter, device: Any = None,
                      figures: dict[str, float] | None = None) -> float:
    """Seconds of the recomputations ``again`` (planning id -> times; ``recomputations``) of
    ``jg``'s planning graph as inductor's fused code runs them (module docstring)."""
    from .codepeak import _extern
    from .jointgraph import is_backward

    graph = jg.graph
    if not again:
        return 0.0
    fig = _figures(jg, device, figures)
    recomputed = {jg.node_of[v] for v in again if v in jg.node_of}
    total = 0.0
    for v, times in again.items():
        n = jg.node_of.get(v)
        if n is None or v not in jg.fusible:
            total += graph[v].cost * times
            continue
        wide = any(t.dtype == torch.float32 for t in costs._tensors(n.meta.get("val")))
        peak = fig.get("flops32", fig["flops"]) if wide else fig["flops"]
        readers = [u for u in _readers(n) if u.op == "call_function" and (is_backward(u) or u in recomputed)]
        stored = any(_extern(u) for u in readers)
        total += times * (costs.flops(n) / peak + (_bytes(n) / fig["bandwidth"] if stored else 0.0))
    return total
