"""Ops traced the way eager PyTorch runs them, so that compiled gradients equal eager's bit for bit.

AOTAutograd traces ``aten.dropout`` through a Python kernel that always emits the fused
``native_dropout`` (mask, then ``x * mask * scale`` with the scale in float). On CUDA eager runs
that fused op too; on the CPU eager ATen takes the unfused path (``_dropout_impl``): Bernoulli
noise in the input's dtype, divided in place by ``1 - p``, then multiplied in. Both draw the
same random numbers, but under bf16 the two roundings differ (``bf16(1/0.9) = 1.109375`` against
a float scale), and gradients drift by up to 1% relative. While tracing, ``eager_dropout()``
makes ``aten.dropout`` on CPU tensors trace to ATen's own unfused ops; other devices keep the
fused op, as eager does.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch._C import DispatchKey

aten = torch.ops.aten
_KEYS = (DispatchKey.Autograd, DispatchKey.CompositeImplicitAutograd)


def _dropout(input: torch.Tensor, p: float, train: bool | None) -> torch.Tensor:
    """``aten.dropout`` as ATen computes it for this device (see ``is_fused_kernel_acceptable``)."""
    if not train or p == 0:
        return input.clone()
    if input.device.type != "cpu" or p == 1 or input.numel() == 0:
        return aten.native_dropout(input, p, train)[0]
    # empty_like as a fresh empty where that is the same layout, so the same draws in the same places,
    # without a dependency on the input (a recomputed mask does not need its input recomputed)
    if input.is_contiguous():
        noise = torch.empty(input.size(), dtype=input.dtype, device=input.device)
    else:
        noise = torch.empty_like(input)
    noise.bernoulli_(1 - p)
    noise.div_(1 - p)
    return input * noise


@contextlib.contextmanager
def eager_dropout() -> Iterator[None]:
    """While tracing, ``aten.dropout`` follows eager's per-device path (a no-op when this torch
    has no Python kernel to replace)."""
    op = aten.dropout.default
    saved = {k: op.py_kernels[k] for k in _KEYS if k in op.py_kernels}
    for k in saved:
        op.py_kernels[k] = _dropout
    _clear(op)
    try:
        yield
    finally:
        op.py_kernels.update(saved)
        _clear(op)


def _clear(op: torch._ops.OpOverload) -> None:
    cache = getattr(op, "_dispatch_cache", None)  # the kernel chosen per dispatch key is cached
    if cache is not None:
        cache.clear()
