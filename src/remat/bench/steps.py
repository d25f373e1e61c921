"""Running and measuring real training steps for the benchmark suite (DESIGN.md, "Measurement
protocol").

- ``train_step``: one forward + backward of a model with the zoo's loss; parameter gradients are
  allocated by a warm-up step and zeroed in place afterwards, so what a measured step allocates
  is activation memory (activations, their gradients, intra-op temporaries), the budget's scale.
- ``profiler_peak``: the allocator-level peak of one step, replayed from the CPU allocations and
  frees that ``torch.profiler(profile_memory=True)`` records. No dispatch mode is involved, so it
  also measures ``torch.compile``d peers (under a dispatch mode torch.compile runs eager).
- ``interleave``: step times of several methods taken round-robin (A B C A B C ...), so machine
  drift hits all of them alike; ``time_ratios`` is the median over rounds of each method's time
  over the reference's time in the same round.
- ``measured_peak``: adapter over ``remat.measure`` (method "tracker": live-storage tracking,
  "profiler", or "cuda": the CUDA allocator's peak), whose result is read defensively: bytes under ``peak``/``peak_bytes``/...

Tested in tests/test_bench.py: the profiler peak of a step that allocates known tensors, the
round-robin order, and ratios of hand-made timings.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch
from torch import nn

from ..errors import InputError

Step = Callable[[], None]


def zero_grads(model: nn.Module) -> None:
    for p in model.parameters():
        if p.grad is not None:
            p.grad.zero_()


def train_step(model: nn.Module, inputs: tuple, loss: Callable[[Any], torch.Tensor]) -> Step:
    """A step closure; runs one warm-up step so parameter gradients exist before measuring.

    On CUDA the step waits for its kernels, so that a wall clock around it times the step.
    """
    from ..measure import synchronize

    def step() -> None:
        loss(model(*inputs)).backward()
        zero_grads(model)
        synchronize()

    step()
    return step


def profiler_peak(step: Step, warmup: bool = False) -> int:
    """Peak bytes allocated on the CPU during ``step`` beyond what was held before it.

    ``warmup`` runs the step once first (re-creating parameter gradients another measurement
    may have dropped, so they are not counted as the step's allocations).
    """
    if warmup:
        step()
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity

    from ..progress import quiet_profiler

    with quiet_profiler(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:  # no USDT lines
        step()
    allocations: list[tuple[int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            allocations.append((event.start_time_ns, event.extra_fields.alloc_size))
    return replay_peak(allocations)


def replay_peak(allocations: list[tuple[int, int]]) -> int:
    """Peak of the running sum of (time, +size | -size) events, taken in time order."""
    current = peak = 0
    for _, size in sorted(allocations, key=lambda e: e[0]):
        current += size
        peak = max(peak, current)
    return peak


def rotated(steps: dict[str, Step], r: int) -> list[tuple[str, Step]]:
    """The steps in round ``r``'s order: the round-robin order started at step ``r`` (mod their
    number), so every method runs at every place in a round as often as the others. On the CPU
    a step's time can depend on the steps before it: one plan built twice, timed at two places of
    a fixed order beside torch.compile (HF Llama bf16, 25 rounds), read 63.9 and 61.6 ms; rotated,
    three builds of it read 0.995-1.020 of torch.compile's step (``bench/results/interleave_order_cpu``)."""
    items = list(steps.items())
    k = r % len(items) if items else 0
    return items[k:] + items[:k]


def interleave(steps: dict[str, Step], repeats: int = 5, warmup: int = 1,
               clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Seconds of each step, methods taken round-robin, each round starting one method later
    (``rotated``); the first ``warmup`` rounds dropped."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(warmup + repeats):
        for name, step in rotated(steps, r):
            started = clock()
            step()
            elapsed = clock() - started
            if r >= warmup:
                times[name].append(elapsed)
    return times


def time_ratios(times: dict[str, list[float]], reference: str) -> dict[str, float]:
    """Median over rounds of time[method] / time[reference] in the same round."""
    ref = times[reference]
    return {name: statistics.median(t / r for t, r in zip(ts, ref)) for name, ts in times.items()}


def measured_peak(measure: Callable[..., Any] | None, model: nn.Module, inputs: tuple,
                  loss: Callable[[Any], torch.Tensor], method: str = "tracker") -> float:
    """Peak activation bytes of one training step by ``remat.measure`` with ``method``.

    ``remat.measure`` steps with gradients set to None and leaves out the storages that end as
    parameter gradients. Without it (``measure=None``) the profiler method is run here on a step
    whose gradients were allocated beforehand and are accumulated in place; that counts the
    freshly computed gradient before it is added, so it reads higher on nets with big layers.
    """
    if measure is None:
        if method != "profiler":
            raise InputError(f"the {method!r} method needs remat.measure; only 'profiler' is built in")
        return float(profiler_peak(train_step(model, inputs, loss), warmup=True))
    try:
        result = measure(model, inputs, method=method, loss_fn=loss)
    except TypeError:  # a measure without those options
        result = measure(model, inputs)
    for key in ("activation_peak", "peak_bytes", "peak"):
        value = result.get(key) if isinstance(result, dict) else getattr(result, key, None)
        if isinstance(value, (int, float)):
            return float(value)
    raise InputError(f"remat.measure returned {type(result).__name__} without a peak in bytes "
                     "(expected a field peak, peak_bytes or activation_peak)")
