"""Ops traced the way eager PyTorch runs them, so that compiled gradients equal eager's bit for bit.

AOTAutograd traces ``aten.dropout`` through a Python kernel that always emits the fused
``native_dropout`` (mask, then ``x * mask * scale`` with the scale in float). On CUDA eager runs
that fused op too; on the CPU eager ATen takes the unfused path (``_dropout_impl``): Bernoulli
noise in the input's dtype, divided in place by ``1 - p``, then multiplied in. Both draw the
same random numbers, but under bf16 the two roundings differ (``bf16(1/0.9) = 1.109375`` against
a float scale), and gradients drift by up to 1% relative. While tracing, ``eager_dropout()``
makes ``aten.dropout`` on CPU tensors trace to ATen's own unfused ops; other devices keep the
fused op, as eager does. Interpolation is traced as ATen's own upsampling ops, not torch's Python
decompositions of them (``_upsample_ops``).

Layouts: fake tensors compute some ops' outputs with torch's Python decompositions, which can lay
them out otherwise than eager's kernel. The pointwise activation backwards (``LAYOUT_OPS``) run on
TensorIterator, whose output takes the layout of the gradient where the gradient and the saved
input differ; the decomposition's ``where`` takes the input's. A trace then bakes a ``view`` where
eager's ``reshape`` copies, and the backward fails (HF Qwen3-Next: the gated delta net's
``softplus`` of a split projection, under ``torch.compile``'s ``aot_eager`` too). While tracing,
``eager_layouts()`` gives those outputs eager's layout.

Kernels: the fake kernel of ``grouped_mm`` (a mixture of experts' matmul, transformers' default)
accepts bf16 operands only, as CUDA's first kernel did; eager's take fp32 too (the CPU's, and
fp32 expert weights under autocast). A step that calls it in fp32 could not be traced on eager's
path, and was traced as torch.compile traces it, where transformers takes a per-expert fallback
and its other compile-time paths (HF Jamba: an associative scan for the sequential one, which
held more memory: its fp32 floor 65% of vanilla against 50% on eager's path). While tracing,
``eager_grouped_mm()`` lets the fake kernel take what eager's took.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import torch
from torch._C import DispatchKey

aten = torch.ops.aten
_KEYS = (DispatchKey.Autograd, DispatchKey.CompositeImplicitAutograd)


def _dropout(input: torch.Tensor, p: float, train: bool | None) -> torch.Tensor:
    """``aten.dropout`` as ATen computes it for this device (see ``is_fused_kernel_acceptable``)."""
    if not train or p == 0:
        return input  # ATen returns the input itself: no copy
    if input.device.type != "cpu" or p == 1 or input.numel() == 0:
        return aten.native_dropout(input, p, train)[0]
    # eager draws into ``empty_like(input)`` in memory order; functionalized, ``bernoulli_`` returns a
    # contiguous tensor, which would put the draws in logical order (a channels-last input got another
    # mask). So: a fresh contiguous empty in the input's memory order, drawn, then permuted to the
    # input's layout; no dependency on the input (a recomputed mask needs no recomputed input)
    order = _memory_order(input)
    noise = torch.empty([input.shape[d] for d in order], dtype=input.dtype, device=input.device)
    noise.bernoulli_(1 - p)
    noise.div_(1 - p)
    if order != list(range(input.dim())):
        noise = noise.permute([order.index(d) for d in range(input.dim())])
    return input * noise


def _memory_order(t: torch.Tensor) -> list[int]:
    """Dimensions of ``empty_like(t)``, outermost first in memory (identity when contiguous), read
    from ``t``'s strides (under functionalization ``empty_like`` reports contiguous strides).

    ``empty_like`` keeps the strides of a non-overlapping dense tensor; for any other (an
    expanded one: XLNet's dropout of its positional embedding, expanded over the batch) it lays
    the result out by ``infer_dense_strides``, TensorIterator's stable ordering in which a dimension
    of stride 0 keeps its place. Sorting every dimension by stride had put the expanded one
    innermost: the mask was drawn in another order than eager's, and the gradients of XLNet's
    positional projection were 97% off."""
    sizes, strides = list(t.shape), list(t.stride())
    if _non_overlapping_and_dense(sizes, strides):
        return sorted(range(t.dim()), key=lambda d: (-strides[d] if sizes[d] > 1 else 0, d))
    perm = list(range(t.dim()))[::-1]  # innermost first, as ATen's ``infer_dense_strides``

    def swap(d0: int, d1: int) -> int:
        s0, s1 = strides[d0], strides[d1]
        if s0 == 0 or s1 == 0:
            return 0  # ambiguous: the contiguous order stays
        if s0 != s1:
            return 1 if s0 > s1 else -1
        return 1 if sizes[d0] > sizes[d1] else 0

    for i in range(1, len(perm)):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    return perm[::-1]


def _non_overlapping_and_dense(sizes: list, strides: list) -> bool:
    """ATen's ``is_non_overlapping_and_dense``: the dimensions longer than one, by stride, tile
    memory exactly."""
    expected = 1
    for d in sorted((d for d in range(len(sizes)) if sizes[d] != 1), key=lambda d: strides[d]):
        if strides[d] != expected:
            return False
        expected *= sizes[d]
    return True


@contextlib.contextmanager
def eager_dropout() -> Iterator[None]:
    """While tracing, ``aten.dropout`` follows eager's per-device path, and interpolation keeps
    ATen's own kernels (``_upsample_ops``; a no-op for ops this torch has no Python kernel for)."""
    op = aten.dropout.default
    saved = {k: op.py_kernels[k] for k in _KEYS if k in op.py_kernels}
    for k in saved:
        op.py_kernels[k] = _dropout
    _clear(op)
    removed = {u: {k: u.py_kernels.pop(k) for k in _KEYS if k in u.py_kernels} for u in _upsample_ops()}
    for u in removed:
        _clear(u)
    try:
        yield
    finally:
        op.py_kernels.update(saved)
        _clear(op)
        for u, kernels in removed.items():
            u.py_kernels.update(kernels)
            _clear(u)


def _upsample_ops() -> list[torch._ops.OpOverload]:
    """Interpolation ops that torch's Python decompositions replace while tracing.

    Traced through them, a bilinear ``F.interpolate`` becomes four gathers and a lerp in the
    forward and an index-put of zeros in the backward, each a full-size temporary: a small
    Segformer's step peaked 15% over eager's at the allocator level, and its gradients were 8e-8
    apart. Without them the trace keeps ``upsample_bilinear2d`` and its backward, eager's kernels."""
    ops = []
    for name in dir(aten):
        if "upsample" in name:
            packet = getattr(aten, name)
            ops += [getattr(packet, o) for o in packet.overloads()]
    return ops


def _clear(op: torch._ops.OpOverload) -> None:
    cache = getattr(op, "_dispatch_cache", None)  # the kernel chosen per dispatch key is cached
    if cache is not None:
        cache.clear()


# pointwise backwards whose kernel lays its output out by TensorIterator over its tensor arguments in
# order, where torch's Python decomposition (what fake tensors run for them) does not
LAYOUT_OPS = ("softplus_backward", "elu_backward", "hardsigmoid_backward", "hardtanh_backward",
              "hardswish_backward", "logit_backward", "native_dropout_backward")


@contextlib.contextmanager
def eager_layouts() -> Iterator[None]:
    """While tracing, ``LAYOUT_OPS``' fake outputs take the layout eager's kernels give them. Only
    these entries of torch's table are put back after (not ``mock.patch.dict``, which restores the
    whole table and would drop a decomposition that a module imported meanwhile registered)."""
    from torch._decomp import decomposition_table

    ops = [getattr(aten, name).default for name in LAYOUT_OPS if hasattr(aten, name)]
    saved = {op: decomposition_table[op] for op in ops if op in decomposition_table}
    decomposition_table.update({op: _eager_layout(fn) for op, fn in saved.items()})
    try:
        yield
    finally:
        decomposition_table.update(saved)


def _eager_layout(decomposition: Callable) -> Callable:
    """``decomposition`` with its fake output laid out as TensorIterator lays out eager's (the strides
    of a pointwise op over the same-shaped tensor arguments, in order). Only a fake tensor's own
    propagation is changed: where the decomposition is traced into a graph (a proxy mode is on), its
    ops are the graph's and stay as they are."""
    from torch._prims_common import compute_elementwise_output_strides
    from torch._subclasses.fake_tensor import FakeTensor

    # wraps: fake tensors run a decomposition only if it is torch's own (module and name)
    @functools.wraps(decomposition)
    def run(*args: Any, **kwargs: Any) -> Any:
        out = decomposition(*args, **kwargs)
        if not isinstance(out, FakeTensor) or torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY):
            return out
        same = [a for a in args if isinstance(a, torch.Tensor) and a.shape == out.shape]
        strides = tuple(compute_elementwise_output_strides(*same))
        if strides == out.stride():
            return out
        return torch.empty_strided(out.shape, strides, dtype=out.dtype, device=out.device)

    return run


@contextlib.contextmanager
def eager_grouped_mm() -> Iterator[None]:
    """While tracing, ``grouped_mm``'s fake kernel takes fp32 and fp16 operands as eager's kernels do:
    the output made as for bf16 (``_create_grouped_mm_output_tensor``). A no-op where this torch's
    meta kernels are laid out otherwise."""
    from unittest import mock

    from torch import _meta_registrations as meta

    common = getattr(meta, "_meta_grouped_mm_common", None)
    make = getattr(meta, "_create_grouped_mm_output_tensor", None)
    if common is None or make is None:
        yield
        return

    def relaxed(mat_a: torch.Tensor, mat_b: torch.Tensor, scale_a: Any = None, scale_b: Any = None,
                offs: Any = None, bias: Any = None, scale_result: Any = None, out_dtype: Any = None,
                use_fast_accum: bool = False) -> torch.Tensor:
        if (scale_a is None and scale_b is None and bias is None and mat_a.dtype == mat_b.dtype
                and mat_a.dtype in (torch.float32, torch.float16)):
            return make(mat_a, mat_b, offs, out_dtype or mat_a.dtype)
        return common(mat_a, mat_b, scale_a, scale_b, offs=offs, bias=bias, scale_result=scale_result,
                      out_dtype=out_dtype, use_fast_accum=use_fast_accum)

    with mock.patch.object(meta, "_meta_grouped_mm_common", relaxed):
        yield
