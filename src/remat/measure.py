"""Measured peak activation memory and step time of one training step (DESIGN.md, measurement protocol).

``measure(model, inputs)`` runs one training step (forward, ``loss_fn`` default: the sum of every
floating output, backward) and reports the peak of the memory the step adds, by one of three
methods, named in the result:

- ``"cuda"``: ``torch.cuda.max_memory_allocated`` minus what was allocated before the step.
- ``"tracker"`` (CPU default): a TorchDispatchMode weak-references the storage of every op
  output and counts live storage bytes; the op-level peak, the granularity ``remat.simulate``
  predicts (it misses temporaries allocated inside one aten kernel, and the buffers inductor's
  code allocates outside the dispatcher: a torch.compile'd model, an ``OptimizedModule`` or one
  holding one, is measured by the profiler unless the tracker is asked for, which is refused).
- ``"profiler"``: ``torch.profiler`` with ``profile_memory=True`` records every CPU-allocator
  allocation and free (pointer, size, time); replaying them gives the allocator-level peak,
  intra-op temporaries included.

What is not activation memory: parameters, buffers and inputs are held before the step and not
counted. Parameter gradients are not counted either: the step starts with ``.grad`` set to
None, and every storage that ends the step as a parameter's ``.grad`` is removed from the
whole timeline (tracker, profiler); on CUDA, where allocations cannot be told apart after the
fact, gradients are allocated (zeros) before the step and so belong to the baseline
(``gradients="allocated"`` does the same on the CPU). A gradient buffer that the step only passes
on to ``.grad`` costs nothing, as in ``simulate``, whose graph has no parameter nodes; one added
into an allocated ``.grad`` counts until it is added, and a compiled backward adds them all in
only when it ends.

Time: ``compare_times(a, b)`` interleaves the two steps (A B A B ...) after warm-up and reports
the median of the per-pair ratios b/a, since step times on shared machines drift between runs.

Tested against hand-sized steps whose byte counts are known exactly (tests/test_measure.py), and
the two CPU methods against each other.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from .errors import InputError

METHODS = ("auto", "cuda", "tracker", "profiler")
GRADIENTS = ("auto", "allocated", "none")  # parameter gradients before the step (``held_gradients``)


@dataclass(frozen=True)
class Measurement:
    peak: int                 # bytes of activation memory at the step's peak
    method: str               # "cuda" | "tracker" | "profiler"
    step_seconds: float | None = None  # median over ``repeats`` timed steps, if any

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def default_loss(out: Any) -> torch.Tensor:
    """The model's own ``loss`` output when it returns one (a Hugging Face model given labels: what
    a training step backpropagates), else the sum of every floating-point output: its backward
    keeps nothing, so it adds no memory."""
    from collections.abc import Mapping

    loss = out.get("loss") if isinstance(out, Mapping) else None
    if isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.requires_grad:
        return loss
    parts = [t.sum() for t in pytree.tree_leaves(out)
             if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not parts:
        raise InputError("the model returns no floating-point tensor that requires grad, so there is no backward "
                         "to plan: let its parameters require grad (model.requires_grad_(True)), or give "
                         "remat.measure a loss_fn")
    loss = parts[0]
    for p in parts[1:]:
        loss = loss + p
    return loss


def call(model: Callable, inputs: Any) -> Any:
    """Call with a tensor, a tuple/list of arguments, or a dict of keyword arguments."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def training_step(model: nn.Module, inputs: Any, loss_fn: Callable[[Any], torch.Tensor] | None = None,
                  set_to_none: bool = True) -> Callable[[], None]:
    """One step: forward, loss, backward. Parameter gradients start at None (or at zero).

    Under an enclosing autocast the step's casts are its own, as in a user's step whose autocast
    block holds the forward alone: autocast's weight cache is emptied before the forward (casts a
    previous step left there would sit in the baseline, so the peak would miss them: all of a
    bf16 Llama's weights, 5% of its peak) and after it (the cache would keep each cast alive
    through the backward, after autograd's last use of it)."""
    loss_fn = loss_fn or default_loss

    def step() -> None:
        model.zero_grad(set_to_none=set_to_none)
        torch.clear_autocast_cache()
        loss = loss_fn(call(model, inputs))
        torch.clear_autocast_cache()
        loss.backward()

    return step


WARMUP_MORE = 3  # steps past ``warmup`` run while each one still compiles


def _warm_up(step: Callable[[], None], steps: int) -> None:
    """``steps`` steps (none: none), then more (up to ``WARMUP_MORE``) while a step compiles: dynamo compiles
    again when a guard fails in the second call (an HF classifier sets ``config.problem_type`` in
    its first), and a compile inside the measured step counts what compiling allocates and keeps
    (5.4 KB over the plan's peak on an HF ResNet under inductor)."""
    from torch._dynamo.utils import counters

    def compiled() -> int:
        return sum(counters["stats"].values()) + sum(counters["aot_autograd"].values())

    for i in range(steps + WARMUP_MORE if steps else 0):
        before = compiled()
        step()
        if i >= steps - 1 and compiled() == before:
            return


def held_gradients(gradients: str, device: Any) -> bool:
    """Whether a step's parameter gradients are allocated before it (``gradients``: "allocated",
    "none", or "auto": as ``measure`` steps on ``device``, allocated on CUDA only). Where they are,
    a compiled backward's returned gradients are temporaries until it ends (``codepeak``)."""
    if gradients not in GRADIENTS:
        raise InputError(f"unknown gradients={gradients!r}: use one of {', '.join(GRADIENTS)}")
    if gradients == "auto":
        return getattr(device, "type", device) == "cuda"
    return gradients == "allocated"


def measure(fn_or_model: Callable, inputs: Any = (), *, method: str = "auto",
            loss_fn: Callable[[Any], torch.Tensor] | None = None, repeats: int = 0,
            warmup: int = 1, gradients: str = "auto") -> Measurement:
    """Peak activation memory (and, with ``repeats``, median step time) of one training step.

    ``fn_or_model``: an ``nn.Module`` (a training step on ``inputs`` is built around it) or a
    callable that runs a whole step itself (``fn(*inputs)``; its gradients are then not told
    apart from activations). ``gradients`` (a module's step): "allocated" before the step (zeros,
    added into), or "none" (set to None, each one left out); "auto": allocated on CUDA only.
    A module is given back as it was found: its ``.grad``, buffers and the RNG state (``given_back``).
    """
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}: use one of {', '.join(METHODS)}")
    params = list(fn_or_model.parameters()) if isinstance(fn_or_model, nn.Module) else []
    if method == "auto":
        method = "cuda" if _on_cuda(params, inputs) else "profiler" if _compiled(fn_or_model) else "tracker"
    elif method == "tracker" and _compiled(fn_or_model):
        raise InputError("method='tracker' cannot see the buffers a torch.compile'd model allocates (inductor's "
                         "code makes them outside the dispatcher): measure it with method='profiler' (the "
                         "default on the CPU for compiled models)")
    if not isinstance(fn_or_model, nn.Module):
        def step() -> None:
            torch.clear_autocast_cache()  # casts of an earlier step are not this step's baseline
            call(fn_or_model, inputs)

        return _measured(step, params, method, warmup, repeats)
    # on CUDA gradients are allocated before the step (zeros) and so belong to the baseline
    allocated = held_gradients(gradients, "cuda" if method == "cuda" else "cpu")
    with given_back(fn_or_model, zeroed=allocated):
        step = training_step(fn_or_model, inputs, loss_fn, set_to_none=not allocated)
        if allocated:
            for p in params:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
        return _measured(step, params, method, warmup, repeats)


def _measured(step: Callable[[], None], params: list[torch.Tensor], method: str, warmup: int,
              repeats: int) -> Measurement:
    _warm_up(step, warmup)
    peak = {"cuda": _cuda_peak, "tracker": _tracker_peak, "profiler": _profiler_peak}[method](step, params)
    seconds = statistics.median(step_times(step, repeats)) if repeats else None
    return Measurement(peak=int(peak), method=method, step_seconds=seconds)


@contextlib.contextmanager
def given_back(model: nn.Module, zeroed: bool) -> Iterator[None]:
    """Put the model back as it was found once its measured steps have run: each parameter's ``.grad``
    (the same tensor, or None: a user's next step would otherwise add its gradients to the measured
    step's), its buffers (BatchNorm statistics) and the RNG states (dropout draws).

    ``zeroed``: the steps zero existing gradients in place and add into them (``gradients="allocated"``),
    so their values are copied to host memory first, to leave the device's memory as it was."""
    grads = [(p, p.grad, p.grad.detach().to("cpu", copy=True) if zeroed and p.grad is not None else None)
             for p in model.parameters()]
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        with torch.no_grad():
            for p, grad, values in grads:
                if values is not None:
                    grad.copy_(values)
                p.grad = grad
            for name, b in model.named_buffers():  # by name: a forward may rebind a buffer
                if name in buffers:
                    b.copy_(buffers[name])
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


def _compiled(fn: Callable) -> bool:
    """Whether ``fn`` is, or holds, torch.compile'd code: an ``OptimizedModule``, a module compiled
    in place (``module.compile()``), a compiled function, or a module keeping one."""
    def compiled_fn(f: object) -> bool:
        return getattr(f, "_torchdynamo_orig_callable", None) is not None

    if isinstance(fn, nn.Module):
        return any(isinstance(m, torch._dynamo.eval_frame.OptimizedModule)
                   or getattr(m, "_compiled_call_impl", None) is not None
                   or any(compiled_fn(v) for v in vars(m).values()) for m in fn.modules())
    return compiled_fn(fn)


def _on_cuda(params: list[torch.Tensor], inputs: Any) -> bool:
    ts = params + [x for x in pytree.tree_leaves(inputs) if isinstance(x, torch.Tensor)]
    return any(t.is_cuda for t in ts)


# ---- CUDA ------------------------------------------------------------------------------------


def _cuda_peak(step: Callable[[], None], params: list[torch.Tensor]) -> int:
    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


# ---- CPU: storage tracker --------------------------------------------------------------------


class StorageTracker(TorchDispatchMode):
    """Counts the bytes of live storages created by ops while active (op-level peak).

    A storage is born when an op returns a tensor whose storage none of the op's arguments has.
    It is held by a weak reference (``StorageWeakRef``), and before each op's outputs are added
    the expired ones are retired, so every free between two ops is ordered before the next
    allocation and the peak is exact at op granularity.
    """

    # higher-order ops (the compiled runtime's ``run_and_save_rng_state``) come here whole: the
    # storages they return are counted like any op's
    supports_higher_order_operators = True

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """torch.compile'd code a step calls runs compiled under the tracker. Dynamo otherwise runs
        it eagerly while a dispatch mode is active (a fused pointwise chain measured at its eager
        peak, 983,048 bytes against the profiler's 196,616) and marks its code to be skipped ever
        after: the user's model would run uncompiled for the rest of the process."""
        return True

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[int, int]] = []  # (birth number, +bytes or -bytes)
        self.live: dict[int, tuple[StorageWeakRef, int, int]] = {}  # key -> (ref, bytes, birth)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.retire()
        seen = {_key(t) for t in pytree.tree_leaves((args, kwargs)) if _strided(t)}
        for t in pytree.tree_leaves(out):
            if _strided(t):
                key = _key(t)
                if key in seen or key in self.live:
                    continue
                size = t.untyped_storage().nbytes()
                birth = len(self.events)  # storage addresses are reused; births are not
                self.live[key] = (StorageWeakRef(t.untyped_storage()), size, birth)
                self.events.append((birth, size))
        return out

    def retire(self) -> None:
        gone = [k for k, (ref, _, _) in self.live.items() if ref.expired()]
        for k in gone:
            _, size, birth = self.live.pop(k)
            self.events.append((birth, -size))

    def births(self, tensors: list[torch.Tensor]) -> set[int]:
        """Birth numbers of the live storages of ``tensors``."""
        return {self.live[_key(t)][2] for t in tensors if _strided(t) and _key(t) in self.live}

    def peak(self, exclude: set[int] = frozenset()) -> int:
        """Peak live bytes, leaving out the storages born as ``exclude``."""
        cur = best = 0
        for birth, delta in self.events:
            if birth in exclude:
                continue
            cur += delta
            best = max(best, cur)
        return best


def _strided(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.layout == torch.strided and t.device.type != "meta"


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _tracker_peak(step: Callable[[], None], params: list[torch.Tensor]) -> int:
    gc.collect()
    tracker = StorageTracker()
    with tracker:
        step()
    tracker.retire()
    return tracker.peak(exclude=tracker.births([p.grad for p in params if p.grad is not None]))


# ---- CPU: profiler replay --------------------------------------------------------------------


def _profiler_peak(step: Callable[[], None], params: list[torch.Tensor]) -> int:
    gc.collect()
    events, _ = cpu_allocations(step)
    # an allocation at a gradient's address that is never freed is that gradient
    return replay_peak(events, {p.grad.data_ptr() for p in params if p.grad is not None})


def cpu_allocations(fn: Callable[[], Any]) -> tuple[list[tuple[int, int, int]], Any]:
    """The CPU allocations and frees (time ns, pointer, +-bytes) while ``fn`` runs, in time order
    (``torch.profiler`` memory events), and what ``fn`` returned."""
    from torch.profiler import ProfilerActivity

    from .progress import quiet_profiler

    with quiet_profiler(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:  # no USDT lines
        out = fn()
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack += e.children
        if e.tag == torch._C._profiler._EventType.Allocation:
            ex = e.extra_fields
            if ex.device.type == "cpu":
                events.append((e.start_time_ns, ex.ptr, ex.alloc_size))
    return sorted(events), out


def replay_peak(events: list[tuple[int, int, int]], left_out: set[int] = frozenset()) -> int:
    """The highest running total of ``events`` (``cpu_allocations``). Frees of blocks allocated
    before are not counted; the last allocation at an address in ``left_out`` that is never freed
    is left out (a gradient the step hands to ``.grad``, an output not counted)."""
    open_at: dict[int, int] = {}
    counted: list[tuple[int, int]] = []  # (allocation index, signed bytes)
    for i, (_, ptr, size) in enumerate(events):
        if size > 0:
            open_at[ptr] = i
            counted.append((i, size))
        elif ptr in open_at:
            counted.append((open_at.pop(ptr), size))
    skip = {i for ptr, i in open_at.items() if ptr in left_out}
    cur = best = 0
    for i, size in counted:
        if i in skip:
            continue
        cur += size
        best = max(best, cur)
    return best


# ---- time ------------------------------------------------------------------------------------


def synchronize() -> None:
    """Wait for queued CUDA work (a no-op on CPU), so a wall clock times the whole step."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def step_times(step: Callable[[], None], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        synchronize()
        started = time.perf_counter()
        step()
        synchronize()
        out.append(time.perf_counter() - started)
    return out


def compare_times(a: Callable[[], None], b: Callable[[], None], repeats: int = 5, warmup: int = 1
                  ) -> dict[str, float]:
    """Interleaved timing (A B A B ...): medians of each and the median of per-pair ratios b/a."""
    for _ in range(warmup):
        a()
        b()
    ta, tb = [], []
    for _ in range(repeats):
        ta += step_times(a, 1)
        tb += step_times(b, 1)
    return {"a_seconds": statistics.median(ta), "b_seconds": statistics.median(tb),
            "ratio": statistics.median(y / x for x, y in zip(ta, tb)), "repeats": repeats}
