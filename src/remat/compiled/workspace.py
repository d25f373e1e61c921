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

from ..measure import cpu_allocations, replay_peak
from .costs import Cache, _real, device_name, node_device, op_key, real_mode, unrunnable
from .memo import remember

_memo: dict[tuple[str, str], float] = {}
_caches: dict[str, Cache] = {}


MATMULS = ("mm", "bmm", "addmm", "baddbmm")
# fused attention: the CPU flash attention backward allocates fp32 gradient accumulators and scratch
# (0.11 MB at a small bf16 DeiT's backward peak, 2.7% of it)
ATTENTION = "_scaled_dot_product"
# a CPU batch norm backward allocates a buffer of its input's size (32 KB of a ResNet's 5.4 MB)
NORM_BACKWARDS = ("native_batch_norm_backward", "native_layer_norm_backward", "native_group_norm_backward")
# gathers and scatters as ATen runs them in eager code (inductor generates its own): on the CPU a bf16
# scatter_add (the backward of a gather) accumulates in an fp32 copy of its result, 1 MB at each of a
# small bf16 DeBERTa-v2's six relative-position gathers, where the walk was 17% under the measured peak
INDEXING = ("gather", "scatter", "scatter_add", "scatter_reduce", "index_add", "index_put", "_unsafe_index_put",
            "index_select", "embedding_dense_backward")


def has_workspace(n: fx.Node, fused: bool = False) -> bool:
    """Ops measured here: convolutions, matmuls (on the CPU a bf16 matmul reorders its
    operands into a scratch buffer: 82 KB of a 1.75 MB step on a tiny Llama; fp32 ones allocate
    none), normalization backwards, fused attention (forward and backward), and in eager code
    (not ``fused``) gathers and scatters (``INDEXING``) and pointwise ops reading tensors of
    several floating dtypes on the CPU (``_mixed_pointwise``)."""
    target = n.target
    if n.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    name = target.overloadpacket.__name__
    return ("convolution" in name or name in MATMULS or name in NORM_BACKWARDS or name.startswith(ATTENTION)
            or (not fused and (name in INDEXING or _mixed_pointwise(n))))


def _mixed_pointwise(n: fx.Node) -> bool:
    """A CPU pointwise op reading tensors of several floating dtypes: TensorIterator copies the
    inputs not of the result's dtype into temporaries (under autocast, a bf16 layer output added to
    the fp32 residual stream: 33 KB at each of a small DeiT's residual adds, its forward's peak)."""
    if torch.Tag.pointwise not in n.target.tags:
        return False
    vals = [a.meta.get("val") for a in n.all_input_nodes]
    tensors = [t for t in vals if isinstance(t, torch.Tensor) and t.dim() > 0 and t.dtype.is_floating_point]
    return len({t.dtype for t in tensors}) > 1 and all(t.device.type == "cpu" for t in tensors)


LAYOUTS = {"fx": "cf", "channels_last": "cl", "contiguous": "nc"}  # the cache keys' prefixes


def workspace(n: fx.Node, layout: str = "fx", uncounted: frozenset[int] = frozenset()) -> float:
    """Bytes ``n``'s op allocates beyond its counted outputs while it runs (0 for ops not measured
    here, or ones that cannot run on synthetic inputs). ``layout``: how its 4-D operands arrive:
    with the fx strides, ``channels_last`` (inductor's layout optimization), or ``contiguous``
    (a convolution backward's operands that inductor computes in its own layout: a depthwise
    backward's scratch is 6.4 MB channels-last and 0.13 MB contiguous). ``uncounted``: positions of outputs the walk
    does not count (gradients the step returns, which become ``.grad``): their allocations are
    left out of the op's peak wherever in the op they happen. A weight gradient is allocated at
    the end of a ``convolution_backward``, after its temporaries are freed, so subtracting it
    from the op's peak under-counted the op by up to 0.1 MB on a CPU ResNet."""
    if not has_workspace(n):
        return 0.0
    mask = sum(1 << j for j in uncounted)
    val = n.meta.get("val")
    # the key is worked out once per op of the joint graph (its copies share its values): building
    # it was a tenth of judging a plan's code (ResNet-152)
    tag = ("workspace", n.target, layout, mask, tuple(id(a.meta.get("val")) for a in n.all_input_nodes))
    return remember(val, tag, lambda: _workspace(n, layout, mask))


def _workspace(n: fx.Node, layout: str, mask: int) -> float:
    if unrunnable(n) is not None:
        return 0.0
    device = node_device(n) or torch.device("cpu")
    key = f"{LAYOUTS[layout]}:{mask}:{op_key(n)}"
    # the device's name carries the CPU's thread count: oneDNN's kernels (and so their scratch)
    # differ between one thread and several (a depthwise backward: 107 KB against 144 KB)
    memo = (device_name(device), key)
    if memo not in _memo:
        cache = _caches.setdefault(memo[0], Cache(device, kind="workspace"))
        if key not in cache.ops:
            try:
                found = _measure(n, device, layout)
            except Exception:  # noqa: BLE001 - fails on synthetic inputs: no workspace counted
                found = {}
            prefix = key[:key.index(":") + 1]
            for m in range(max(1 << _outputs(n), mask + 1)):
                cache.put(f"{prefix}{m}:{op_key(n)}", float(found.get(m, 0)))
            cache.save()
        _memo[memo] = cache.ops[key]
    return _memo[memo]


def _outputs(n: fx.Node) -> int:
    return sum(isinstance(t, torch.Tensor) for t in pytree.tree_leaves(n.meta.get("val")))


def _operand(val: Any, device: torch.device, layout: str) -> Any:
    t = _real(val, device)
    if layout != "fx" and isinstance(t, torch.Tensor) and t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last if layout == "channels_last" else torch.contiguous_format)
    return t


def _measure(n: fx.Node, device: torch.device, layout: str) -> dict[int, int]:
    """Workspace bytes by mask of outputs left uncounted (bit ``j``: output ``j``)."""
    with real_mode(), torch.no_grad():
        args = pytree.tree_map_only(fx.Node, lambda a: _operand(a.meta.get("val"), device, layout), n.args)
        kwargs = pytree.tree_map_only(fx.Node, lambda a: _operand(a.meta.get("val"), device, layout),
                                      n.kwargs)
        n.target(*args, **kwargs)  # warm-up: one-time allocations (primitive caches) are not the op's
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            base = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            out = n.target(*args, **kwargs)
            torch.cuda.synchronize(device)
            events = None
            peak = torch.cuda.max_memory_allocated(device) - base
        else:
            events, out = cpu_allocations(lambda: n.target(*args, **kwargs))
        outs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        ptrs = [t.untyped_storage().data_ptr() for t in outs]
        sizes = {p: t.untyped_storage().nbytes() for p, t in zip(ptrs, outs)}
    found = {}
    for mask in range(1 << len(outs)):
        skipped = {p for j, p in enumerate(ptrs) if mask >> j & 1}
        made = sum(size for p, size in sizes.items() if p not in skipped)
        if events is not None:
            peak = replay_peak(events, skipped)
        # on CUDA the order is not known: the uncounted outputs are taken as allocated at the peak
        found[mask] = max(int(peak) - int(made), 0)
    return found
