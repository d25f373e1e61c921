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

The solvers still plan on the unfused prices. The fused selective search (the partitioner's
``_judged_selective``) orders its moves both ways, by the planning graph's costs and by these prices
(``priced``: a fusible op taken as stored when any op reading it is extern), and keeps the plan
whose recomputation costs fewer fused seconds. Unfused, a bf16 ViT's layer norm recomputed from the
residual it reads cost as much as the q, k or v projection it feeds (0.10 against 0.086 ms), so at
half its peak the search recomputed thirteen projections and fc1 matmuls (2.4 ms predicted, a step
1.08x torch.compile's); by fused prices it recomputes two fc1 matmuls and the layer norms and GELUs
(1.6 ms with the GELUs' erf rated, 1.03x). Neither order is best everywhere: on a ResNet at half
its peak the priced one, which drops every batch norm and ReLU before any convolution output, never
fits, and the other does.
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
        readers = [u for u in _readers(n) if u.op == "call_function" and (is_backward(u) or u in recomputed)]
        total += times * _fused_seconds(n, fig, any(_extern(u) for u in readers))
    return total


# How much faster inductor's vectorized C++ runs a transcendental function than aten's kernel, whose rate
# the CPU's figures hold (``costs.calibrate``): fp32, 256Ki elements, one thread, torch 2.13, this project's
# 2-core AMD EPYC (erf 1.77 against 0.81 G elements/s, tanh 0.67 against 0.38, exp 2.35 against 1.19,
# sigmoid 2.41 against 2.30).
FUSED_RATE_GAIN = {"erf": 2.2, "tanh": 1.8, "exp": 2.0, "sigmoid": 1.0}


def _fused_seconds(n: fx.Node, fig: dict[str, float], stored: bool) -> float:
    """One fusible op recomputed inside a fused kernel: its arithmetic (transcendental functions at
    the rate fused code runs them, ``FUSED_RATE_GAIN`` times the device's), and its write when
    ``stored``. Without the rate a bf16 Llama's SiLU cost nothing to recompute: the plan that
    recomputed it predicted 0.33 ms against another's 0.64 ms and ran 1.078x torch.compile b=1's
    step against 1.009x (``bench/results/fused_prices_cpu``); at aten's rate a bf16 ViT's GELU cost
    as much as the fc1 matmul before it, and its plan recomputed matmuls again (1.10x against 1.03x)."""
    wide = any(t.dtype == torch.float32 for t in costs._tensors(n.meta.get("val")))
    peak = fig.get("flops32", fig["flops"]) if wide else fig["flops"]
    work = costs.flops(n) / peak
    rated = costs.rated(n)
    if rated is not None and fig.get(rated[0]):
        work = max(work, rated[1] / (fig[rated[0]] * FUSED_RATE_GAIN.get(rated[0], 1.0)))
    return work + (_bytes(n) / fig["bandwidth"] if stored else 0.0)


def priced(jg: Any, graph: Any, device: Any = None, figures: dict[str, float] | None = None) -> Any:
    """``graph`` (``jg``'s planning graph, or ``with_tail`` of it) with each fusible value's cost
    as inductor's code pays it when recomputed (``_fused_seconds``; stored where any op reading it
    is extern): what the fused selective search orders its moves by (module docstring)."""
    from .codepeak import _extern

    fig = _figures(jg, device, figures)
    costs_of = {}
    for v in jg.fusible:
        n = jg.node_of.get(v)
        if n is not None and v in graph:
            costs_of[v] = _fused_seconds(n, fig, any(_extern(u) for u in _readers(n) if u.op == "call_function"))
    return graph.with_costs(costs_of)
