"""Fixes for inductor bugs of the installed torch that remat's graphs run into, applied while
remat compiles (``fusion.inner_compile``) and only where the installed inductor lacks them.

- **2-D tiled scatter-add with several threads** (pytorch/pytorch#191837, fixed upstream by
  #191861). When a CPU kernel that transposes a tile also accumulates into a buffer at
  computed indices (``index_put`` with ``accumulate``: the backward of HF Falcon's
  ``fused_qkv[..., [-2], :]``, of ``F.fold``), ``CppTile2DKernel.store`` offsets the index by the
  tile's inner loop variable, and the parallel ``atomic_add`` path offsets it again. The
  doubled offset writes past the buffer: heap corruption within a few steps of remat's code for
  a 4-layer Falcon with two threads (none with one thread, which takes a path without atomics),
  wrong values where it does not crash. The fix offsets the index once: the atomic path
  derives it itself.
- **Saved tensors that share a storage, both donated** (``unaliased_donations``). AOTAutograd
  marks a saved tensor donated (the backward's code may write over it once it is dead) when it
  aliases no forward input, no user output and no input gradient, but it does not check the saved
  tensors against one another. remat's plans can save two views of one storage; inductor then
  wrote a kernel's output over one of them at its last read, while the other was still to be read:
  HF Mamba (fp32, CPU) planned within half its peak got gradients 41% off in its last layer's scan
  parameters (the same graphs run as fx code: 9e-7). Saved tensors sharing a storage are not
  donated.
- **Random ops replayed from a saved generator state read their inputs in any layout**
  (``replay_strides``). remat runs a random op the backward recomputes (an attention that may draw
  dropout included) as ``run_with_rng_state(state, op, *args)``, and its forward as
  ``run_and_save_rng_state``. Inductor lowers these higher-order ops as plain fallbacks, without the
  layout constraint it gives the op itself, and hands them inputs in whatever layout its code chose
  (behind convolutions under its channels-last layout optimization, a saved query came back with
  strides (2304, 1, 144, 4) where eager's are (2304, 36, 144, 1)); CPU flash attention reads a last
  dimension that is not dense as garbage. HF MobileViT under bf16 autocast, planned within half its
  peak, got non-finite gradients or gradients 100% off (the same graphs run as fx code: as
  torch.compile's). The op's inputs are now laid out by the op's own constraint (attention: a dense
  last dimension), or else in the strides the graph records, so that a draw consumes the generator
  in the same order each time; a copy only where the layout differs.
- **Average-pool gradients of windows that ``ceil_mode`` lets overhang** (``exact_pool_backward``;
  pytorch/pytorch#198119, open). With ``count_include_pad`` (the default), inductor's
  ``avg_pool2d_backward`` and ``avg_pool3d_backward`` divide every window's gradient by the whole
  kernel, where eager's kernel and inductor's own forward divide an overhanging window by its part
  inside the padded input. HF EfficientNet pools its last 2 x 2 map with ``AvgPool2d(1280,
  ceil_mode=True)``: under torch.compile the gradient into the pool is 409,600 times too small
  (1280² where eager divides by 4), and the last batch norm's bias gets 5.6e-8 where eager's is
  2.3e-2. Where a window overhangs, remat's code runs eager's kernel instead (a fallback kernel:
  ``codepeak`` walks it as one).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from types import SimpleNamespace
from typing import Any, Iterator


@functools.cache
def _tile2d_store_needs_fix() -> bool:
    """Whether the installed ``CppTile2DKernel.store`` hands the atomic path an offset index (it
    has no branch of its own for ``atomic_add``)."""
    try:
        from torch._inductor.codegen.cpp import CppTile2DKernel
        return "atomic_add" not in inspect.getsource(CppTile2DKernel.store)
    except Exception:  # noqa: BLE001 - inductor internals moved: leave them alone
        return False


def cache_key() -> str:
    """The fixes applied (and ``fusion.uncopied_inputs``), for the key of inductor's caches."""
    return ("fixes=tile2d-atomic-add" if _tile2d_store_needs_fix() else "fixes=none") + \
        ":unaliased-donations:replay-strides:exact-pool-backward:uncopied-inputs"


@contextlib.contextmanager
def unaliased_donations() -> Iterator[None]:
    """AOTAutograd's donated saved tensors without those that share a storage with another saved
    tensor (module docstring), for the ``with`` block: around remat's ``compile_fx``."""
    try:
        from torch._functorch._aot_autograd import graph_compile
        original = graph_compile.collect_bw_donated_buffer_idxs
    except (ImportError, AttributeError):  # inductor internals moved: nothing to patch
        yield
        return
    from collections import Counter

    from torch.multiprocessing.reductions import StorageWeakRef

    def storage(n: Any) -> Any:
        val = getattr(n, "meta", {}).get("val")
        try:
            return StorageWeakRef(val.untyped_storage())
        except (AttributeError, NotImplementedError, RuntimeError):
            return None

    def collect(fw_module: Any, bw_module: Any, fw_metadata: Any) -> list[int]:
        donated = original(fw_module, bw_module, fw_metadata)
        if not donated:
            return donated
        outs = next(reversed(fw_module.graph.find_nodes(op="output"))).args[0]
        stores = [storage(n) for n in outs[fw_metadata.tensors_saved_for_backwards_slice]]
        count = Counter(s for s in stores if s is not None)
        shift = fw_metadata.num_symints_saved_for_bw or 0
        return [i for i in donated if not (0 <= i - shift < len(stores) and count[stores[i - shift]] > 1)]

    graph_compile.collect_bw_donated_buffer_idxs = collect
    try:
        yield
    finally:
        graph_compile.collect_bw_donated_buffer_idxs = original


@contextlib.contextmanager
def replay_strides() -> Iterator[None]:
    """Inductor lowering ``run_with_rng_state`` and ``run_and_save_rng_state`` with the inputs of
    the op they run laid out as that op's own lowering lays them out (module docstring), for the
    ``with`` block."""
    try:
        from torch._inductor import lowering
        from torch._inductor.virtualized import V
        from torch._prims import rng_prims
        replays = {rng_prims.run_with_rng_state: 1, rng_prims.run_and_save_rng_state: 0}  # op's position
        lowerings = {hop: lowering.lowerings[hop] for hop in replays}
        exact, by_fallback = lowering.constrain_to_fake_tensors, lowering.constrain_to_fx_strides_if_fallback_random
    except (ImportError, AttributeError, KeyError):  # inductor internals moved: nothing to patch
        yield
        return

    def keeping_layouts(hop: Any) -> Any:
        at = replays[hop]

        def lowered(*args: Any, **kwargs: Any) -> Any:
            op, node = args[at], V.graph.current_node
            constraint = lowering.maybe_layout_constraints(op)
            if constraint in (None, exact, by_fallback):  # the graph's strides: draws in one order each time
                constraint = lowering.constrain_to_fx_strides
            inner = SimpleNamespace(target=op, args=node.args[at + 1:], kwargs=node.kwargs, meta=node.meta)
            inputs, kwargs = constraint(inner, *args[at + 1:], **kwargs)
            return lowerings[hop](*args[:at + 1], *inputs, **kwargs)
        return lowered

    lowering.lowerings.update({hop: keeping_layouts(hop) for hop in replays})
    try:
        yield
    finally:
        lowering.lowerings.update(lowerings)


@contextlib.contextmanager
def fixed() -> Iterator[None]:
    """Inductor with the fixes above, for the ``with`` block."""
    with replay_strides(), exact_pool_backward(), _tile2d_store():
        yield


def overhangs(size: list, pooled: list, kernel: list, stride: list, padding: list) -> bool:
    """Whether an average pool's last window in some dimension starts inside the padded input
    but ends past it (``ceil_mode``): ``pooled`` outputs where the floor mode has fewer.
    Sizes are ints, or sympy expressions decided where they can be (else: it overhangs)."""
    for n, out, k, st, p in zip(size, pooled, kernel, stride or kernel, padding or [0] * len(kernel)):
        floor = (n + 2 * p - k) // st + 1
        try:
            if bool(out > floor):
                return True
        except TypeError:  # a symbolic size it cannot decide
            return True
    return False


@contextlib.contextmanager
def exact_pool_backward() -> Iterator[None]:
    """Inductor lowering ``avg_pool2d_backward`` and ``avg_pool3d_backward`` as eager's kernel
    where a window overhangs and padding counts (module docstring), for the ``with`` block."""
    try:
        import torch
        from torch._inductor import lowering
        aten = torch.ops.aten
        pools = {aten.avg_pool2d_backward: lowering.fallback_avg_pool2d_backward,
                 aten.avg_pool3d_backward: lowering.fallback_avg_pool3d_backward}
        originals = {op: lowering.lowerings[op] for op in pools}
    except (ImportError, AttributeError, KeyError):  # inductor internals moved: nothing to patch
        yield
        return

    def exact(op: Any) -> Any:
        lowered, fallback = originals[op], pools[op]

        def lower(grad: Any, x: Any, kernel: Any, stride: Any, padding: Any, ceil_mode: bool,
                  count_include_pad: bool, divisor_override: Any = None) -> Any:
            args = (grad, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
            dims = len(kernel)
            if (ceil_mode and count_include_pad and divisor_override is None
                    and overhangs(list(x.get_size())[-dims:], list(grad.get_size())[-dims:], list(kernel),
                                  list(stride), list(padding))):
                return fallback(*args)
            return lowered(*args)
        return lower

    keys = {op: [k for k, v in lowering.lowerings.items() if v is originals[op]] for op in pools}
    lowering.lowerings.update({k: exact(op) for op in pools for k in keys[op]})
    try:
        yield
    finally:
        lowering.lowerings.update({k: originals[op] for op in pools for k in keys[op]})


@contextlib.contextmanager
def _tile2d_store() -> Iterator[None]:
    """``CppTile2DKernel.store`` with the atomic path's index offset once (module docstring)."""
    if not _tile2d_store_needs_fix():
        yield
        return
    import torch._inductor.config as config
    from torch._inductor.codegen.cpp import CppTile2DKernel, CppVecKernel

    original = CppTile2DKernel.store

    def store(self: Any, name: str, index: Any, value: Any, mode: Any = None) -> Any:
        parallel = config.cpp.dynamic_threads or self.num_threads != 1
        if mode == "atomic_add" and parallel and not self.need_vec_transpose(self.rename_indexing(index)):
            # the atomic path reads the index through ``ops.index_expr``, which offsets it itself
            return CppVecKernel.store(self, name, index, value, mode)
        return original(self, name, index, value, mode)

    CppTile2DKernel.store = store
    try:
        yield
    finally:
        CppTile2DKernel.store = original
