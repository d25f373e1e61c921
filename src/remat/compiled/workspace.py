"""The temporaries a convolution allocates inside its own kernel, measured once per signature.

A convolution (forward or backward) allocates scratch memory that no fx value names: oneDNN
reorders its operands into blocked layouts on the CPU, cuDNN takes a workspace on a GPU. The
walk of the generated code (``codepeak``) sees only the values, so on a ResNet (CPU, fp32) its
peak was 0.64 MiB (11%) under the allocator-level peak; the largest temporary was a
``convolution_backward``'s, 0.57 MiB. Here each distinct convolution (overload, shapes, strides,
dtypes, arguments, and the memory format its 4-D operands arrive in) runs once on real tensors
like its fake ones, and what it allocates beyond its outputs is its workspace, cached on disk
beside the op timings (``costs.Cache``, kind "workspace"). On the CPU the allocations are read
from ``torch.profiler``'s memory events, on CUDA from the allocator's peak.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from .costs import Cache, _real, node_device, op_key, real_mode, unrunnable

_memo: dict[tuple[str, str], float] = {}
_caches: dict[str, Cache] = {}


MATMULS = ("mm", "bmm", "addmm", "baddbmm")


def has_workspace(n: fx.Node) -> bool:
    """Ops measured here: convolutions and matmuls (on the CPU a bf16 matmul reorders its
    operands into a scratch buffer: 82 KB of a 1.75 MB step on a tiny Llama; fp32 ones allocate
    none)."""
    target = n.target
    if n.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    name = target.overloadpacket.__name__
    return "convolution" in name or name in MATMULS


def workspace(n: fx.Node, channels_last: bool = False) -> float:
    """Bytes ``n``'s op allocates beyond its outputs while it runs (0 for ops not measured here,
    or ones that cannot run on synthetic inputs). ``channels_last``: its 4-D operands arrive
    channels-last (inductor's layout optimization)."""
    if not has_workspace(n) or unrunnable(n) is not None:
        return 0.0
    device = node_device(n) or torch.device("cpu")
    key = f"{'cl' if channels_last else 'cf'}:{op_key(n)}"
    memo = (str(device), key)
    if memo not in _memo:
        cache = _caches.setdefault(str(device), Cache(device, kind="workspace"))
        if key not in cache.ops:
            try:
                cache.put(key, float(_measure(n, device, channels_last)))
            except Exception:  # noqa: BLE001 - fails on synthetic inputs: no workspace counted
                cache.put(key, 0.0)
            cache.save()
        _memo[memo] = cache.ops[key]
    return _memo[memo]


def _operand(val: Any, device: torch.device, channels_last: bool) -> Any:
    t = _real(val, device)
    if channels_last and isinstance(t, torch.Tensor) and t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def _measure(n: fx.Node, device: torch.device, channels_last: bool) -> int:
    with real_mode(), torch.no_grad():
        args = pytree.tree_map_only(fx.Node, lambda a: _operand(a.meta.get("val"), device, channels_last), n.args)
        kwargs = pytree.tree_map_only(fx.Node, lambda a: _operand(a.meta.get("val"), device, channels_last),
                                      n.kwargs)
        n.target(*args, **kwargs)  # warm-up: one-time allocations (primitive caches) are not the op's
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            base = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            out = n.target(*args, **kwargs)
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device) - base
        else:
            peak, out = _cpu_peak(lambda: n.target(*args, **kwargs))
        made = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                    for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)}.values())
    return max(int(peak) - int(made), 0)


def _cpu_peak(fn: Any) -> tuple[int, Any]:
    """Peak bytes allocated on the CPU while ``fn`` runs (profiler memory events), and its result."""
    from torch.profiler import ProfilerActivity

    from ..progress import quiet_profiler

    with quiet_profiler(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    sizes = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack += e.children
        if e.tag == torch._C._profiler._EventType.Allocation and e.extra_fields.device.type == "cpu":
            sizes.append((e.start_time_ns, e.extra_fields.alloc_size))
    cur = peak = 0
    for _, size in sorted(sizes):
        cur += size
        peak = max(peak, cur)
    return peak, out
