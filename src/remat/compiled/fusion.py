"""Inductor's settings for remat's graphs: its code must run in the order, and hold the memory,
that the fused walk (``codepeak``) judged the plan by.

- No peak-memory reordering (``reorder_for_peak_memory``): by its own estimate it picks orders
  that run a recomputed weight cast first.
- No buffer pool (``allow_buffer_reuse``): inductor keeps a freed buffer allocated until a later
  one of the same size takes it, when its own estimate says that raises no peak. Its estimate is
  the graph's, not the step's: in a ViT's backward (CPU) a GELU gradient held that way for the
  next layer's put the step 70 KiB (10%) over the walk, and 0.31 MiB (5%) at the benchmark's size.
  Without the pool a buffer is freed after its last use, as the walk counts, and both peaks
  measured within 0.7% of it (0.0 at the benchmark's size).
- Horizontal fusion as inductor's own (up to 64 scheduler nodes apart), held by the guard below
  (since 25f87d8; only adjacent kernels before, see the end of this docstring); in a graph with no
  guard (a dynamic-shape graph's code, split again from the symbolic graph) adjacent kernels only.
- No fusion the graph's guard vetoes (``fusionguard``: a fused kernel allocates its later
  members' outputs where its first one stood; vetoed where that holds more than the walk's peak,
  except the fusions the walk itself counts on: a value realized for its readers, fused into their
  kernel, ``codepeak._kernel_local``).
- Graph inputs are not copied channels-last when the graph starts (``uncopied_inputs``). Under
  its layout optimization inductor copies every 4-D input upstream of a convolution, and where
  the forward saves that input (a conv weight, the images) it saves the copy, held through the
  step: on the CPU-size HF ResNet (bf16) 0.12 of the eager step's peak, and with it no plan's
  channels-last code met half that peak. Without it a convolution reading such an input copies
  it while it runs, and the backward gets the input itself (``codepeak.fx_layout_inputs``).
- On the CPU, kernels share a C++ function only where the guard allows it (``_kernels_grouped``):
  inductor runs the kernels between two extern calls as one function, their outputs allocated
  before it and what they read freed after it; the walk frees after each kernel, as inductor's
  GPU code does.

The first three were not exact everywhere: on the held-out Llama (bf16, CPU) at 50% of vanilla
the step measured 0.37 MiB (1.7%) over the walk with the horizontal limit and 0.62 MiB (2.9%)
with the pool off too, and at 31% 0.49 MB (3.6%) over, past its budget. The last two take both
apart: at 50% the recomputed residual stream ran in one C++ function with the loss's gradient,
its three outputs allocated while the saved fp32 log-probabilities were held; at 31% inductor
fused the whole recomputed stream into the backward's first kernel, moving the layers' matmuls up
to it. With both, the two steps measure 0.9999 and 0.997 of the walk (``test_fusionguard``), at
the same step time (one process, 15 interleaved rounds against torch.compile b=1: Llama bf16
0.990 / 1.032 with them, 1.008 / 1.033 without; GPT-2 bf16 1.010 / 0.952 against 1.027 / 0.969;
ViT fp32 1.007 / 0.945 against 1.044 / 0.965; ResNet fp32 1.145 / 0.981 against 1.136 / 1.001).

Inductor fuses two kernels that share an input even when they run far apart (up to 64 scheduler
nodes: ``Scheduler.are_long_distant_nodes``). The fused kernel runs where the first of them did,
so the second one's output is allocated early and lives longer. In a graph remat planned, that
moves a recomputed value of one layer up to where another layer's runs: measured on ViT (bf16,
CPU), a layer-norm recomputation fused across layers put the backward 0.31 MiB (4%) over the
peak the fused walk (``codepeak``) predicts. With horizontal fusion limited to kernels at most
4 nodes apart the measured peak is the walk's to 0.004 MiB, at the same step time (ViT bf16
1.04x of vanilla either way, Llama bf16 1.08x/1.09x).

Four nodes still let a kernel move past the ones between: in HF Falcon's backward (CPU, fp32)
the GELU recomputed for a weight gradient fused with the GELU gradient three nodes later, so the
weight gradient's matmul ran after both and the GELU output lived beside the input gradient
(64 KB of a 0.64 MB step; with a saved copy the walk did not count, ``codepeak._output_copy``,
14.8% over the budget). Only adjacent kernels fused then (nothing runs between them, nothing
moves): Falcon measured within its budget, at the same step times on this CPU.

Both of those came before the fusion guard, which vetoes any fusion, horizontal ones included,
that holds more than the walk's peak. On an H200 (Llama 16x1024 bf16 at torch.compile b=1's
peak, ``bench/gpu_probe/inductor_gap.py``) the adjacent-only limit cost 4.4% of the step (1.092x
torch.compile's against 1.046x with inductor's own horizontal fusion, 1200 kernels against 1121)
at the same peak to the byte; on the CPU, 12 HF models at half their eager peak (fp32, one thread)
measure the same peaks, to the byte, either way (``bench/results/horizontal_fusion_cpu``). With the
guard, the Falcon and ViT cases above measure within their budgets (``test_compiled``). A
dynamic-shape graph's code has no guard: there inductor's own horizontal fusion put tiny Llama's
step at its planned length 24% over the walk (159,880 bytes against 129,156), so its kernels fuse
horizontally only when adjacent, as before.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from .. import progress
from . import accumulate, fusionguard, tangents

UNGUARDED_DISTANCE = 1  # scheduler nodes apart that kernels of a graph with no guard may fuse horizontally
BUFFER_POOL = False      # inductor's ``allow_buffer_reuse`` for remat's graphs
GROUP_KERNELS = True     # CPU kernels share a C++ function where the guard allows (False: one each)


def config_patches() -> dict[str, Any]:
    """``compile_fx``'s ``config_patches`` for remat's graphs (module docstring)."""
    return {"reorder_for_peak_memory": False, "allow_buffer_reuse": BUFFER_POOL}


def cache_key() -> str:
    """What these settings (and the fixes of ``inductor_fixes``) add to the key of inductor's
    caches: code cached without them is not handed back."""
    from .inductor_fixes import cache_key as fixes

    kernels = "grouped-where-guarded" if GROUP_KERNELS else "kernel-per-call"
    return f"horizontal=guarded/{UNGUARDED_DISTANCE}:pool={BUFFER_POOL}:guarded:{kernels}:{fixes()}"


def _choices(guard: Any = None) -> Any:
    from torch._inductor.choices import InductorChoices

    class RematChoices(InductorChoices):
        """``InductorChoices`` with no fusion, vertical or horizontal, the graph's ``guard`` vetoes
        (``fusionguard``); without a guard, horizontal fusion kept to adjacent kernels."""

        def can_fuse(self, scheduler: Any, node1: Any, node2: Any, shared_data_score: int) -> bool:
            if not InductorChoices.can_fuse(scheduler, node1, node2, shared_data_score):
                return False
            return guard is None or guard.allows(scheduler, node1, node2)

        @staticmethod
        def can_fuse_horizontal(scheduler: Any, node1: Any, node2: Any, shared_data_score: int) -> bool:
            if guard is None:
                apart = max(abs(node1.min_order - node2.max_order), abs(node2.min_order - node1.max_order))
                if apart > UNGUARDED_DISTANCE:
                    return False
            return InductorChoices.can_fuse_horizontal(scheduler, node1, node2, shared_data_score)

    return RematChoices()


@contextlib.contextmanager
def _keyed() -> Iterator[None]:
    """Inductor's cache keys for a compile that remat's partitioner does not key: the backward,
    compiled when it first runs, after the forward's settings are gone. Without this a backward
    with the same graph compiled by ``torch.compile``, or by remat without these settings and
    fixes, was handed back from the FX graph cache (Falcon with two threads kept crashing on a
    kernel cached before ``inductor_fixes``). Inductor hashes ``custom_partitioner_fn`` by its
    uuid; a compile of already partitioned graphs never calls it."""
    import torch._inductor.config as config
    from torch._inductor.custom_graph_pass import CustomPartitionerFn

    if config.custom_partitioner_fn is not None:  # the forward: remat's partitioner keys it
        yield
        return

    class Keyed(CustomPartitionerFn):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("remat: the cache key of a compile of partitioned graphs is not a partitioner")

        def uuid(self) -> Any:
            return f"remat:{cache_key()}"

        def __reduce__(self) -> Any:
            return (str, (self.uuid(),))

    with config.patch(custom_partitioner_fn=Keyed()):
        yield


@contextlib.contextmanager
def _kernels_grouped(guard: Any) -> Iterator[None]:
    """Inductor's CPU kernels run in one C++ function only where the fused walk's peak allows it.
    Inductor gathers the kernels between two extern calls into one function, allocates all their
    outputs before it and frees what they read after it: the held-out Llama's log-softmax
    backward (bf16, CPU) ran in one function with the residual stream recomputed after it, whose
    three outputs (0.65 MB) were allocated while the saved fp32 log-probabilities (8 MiB) were
    still held, 2.9% over the walk, which frees after each kernel as inductor's GPU code does.
    A kernel joins the function before it where ``guard`` finds that holds no kernel above the
    walk's peak; otherwise (and with no guard) it starts a function of its own. Each function is
    a C++ module compiled apart, so grouping is compile time saved (the held-out ResNet at "50%":
    98 modules a kernel each, 63 grouped, a first step of 98.4 s against 82.1 s, the same peak;
    ``bench/bench_kernel_groups.py``)."""
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.virtualized import V

    original = CppScheduling.codegen_node

    if not GROUP_KERNELS:
        guard = None

    def codegen_node(self: Any, node: Any) -> None:
        sched = V.graph.scheduler
        running = self.__dict__.get("_remat_running")
        grouped = bool(self.kernel_group.scheduled_nodes)
        if grouped and (guard is None or not guard.joins(sched, running, node, _late(sched, node))):
            _flush_before(sched, node)
            grouped = False
        if not grouped:
            running = []
            if guard is None or not guard.joins(sched, running, node, 0.0):
                running = None
        original(self, node)
        self._remat_running = running
        if running is None:
            self._set_flush_status(True)

    CppScheduling.codegen_node = codegen_node
    try:
        yield
    finally:
        CppScheduling.codegen_node = original


def _late(sched: Any, node: Any) -> float:
    """Bytes the scheduler frees at its next flush, read last by the kernels before ``node``."""
    from torch._inductor.utils import sympy_product
    from torch._inductor.virtualized import V

    graph = V.graph
    sizes = sched.__dict__.setdefault("_remat_sizes", fusionguard._sizes(sched))
    total = 0.0
    for name in sched.buffer_names_to_free - node.last_usage - graph.removed_buffers - graph.wrapper_code.freed:
        if name in sizes:
            total += sizes[name]
        elif name in graph.graph_inputs:
            inp = graph.graph_inputs[name]
            dtype = getattr(inp, "get_dtype", lambda: None)()
            if dtype is not None:
                numel = graph.sizevars.optimization_hint(sympy_product(inp.get_size()), fallback=0)
                total += numel * dtype.itemsize
    return total


def _flush_before(sched: Any, node: Any) -> None:
    """End the C++ function before ``node``: its kernels' call, then the frees of what they read
    last (not what ``node`` reads last: the scheduler has already counted those)."""
    mine = sched.buffer_names_to_free & node.last_usage
    sched.buffer_names_to_free -= mine
    sched.flush()
    sched.buffer_names_to_free |= mine


@contextlib.contextmanager
def uncopied_inputs() -> Iterator[None]:
    """Inductor's layout optimization with no graph input among the values it lays out
    channels-last (``GraphLowering.find_nodes_prefer_channels_last``): see the module docstring."""
    from torch._inductor.graph import GraphLowering

    find = GraphLowering.find_nodes_prefer_channels_last

    def without_inputs(self: Any) -> Any:
        found = find(self)
        return type(found)(n for n in found if n.op != "placeholder")

    GraphLowering.find_nodes_prefer_channels_last = without_inputs
    try:
        yield
    finally:
        GraphLowering.find_nodes_prefer_channels_last = find


def inner_compile(state: Callable[[], list] | None = None) -> Callable[..., Any]:
    """``compile_fx``'s ``inner_compile`` for remat's forward and backward graphs: inductor's own,
    run with ``RematChoices`` and the fixes of ``inductor_fixes`` (the backward is compiled later
    than the forward; both go with each call). ``state()``: the graph's inputs that are parameters
    (None elsewhere), for a backward with an accumulating form (``accumulate``)."""
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.virtualized import V

    from .inductor_fixes import fixed

    def compile_inner(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("is_backward") and state is not None and accumulate.ACCUMULATING in args[0].meta:
            # two forms, each compiled as below; which runs is decided per step (``accumulate``)
            return accumulate.compiled(args[0], args[1], lambda gm, ex: compile_inner(gm, ex, *args[2:], **kwargs),
                                       state)
        V.choices  # noqa: B018 - the thread's default handler exists before it is swapped out
        part = "backward" if kwargs.get("is_backward") else "forward"
        guard = fusionguard.of(args[0])
        with progress.task(f"inductor: compiling the {part} graph"), V.set_choices_handler(_choices(guard)), \
                fixed(), uncopied_inputs(), _kernels_grouped(guard), _keyed(), fusionguard.compiling(guard):
            compiled = compile_fx_inner(*args, **kwargs)
        gm, rest = args[0], args[1:]
        if tangents.ORIGINAL not in gm.meta:
            return compiled
        return tangents.Backward(compiled, gm, lambda original: compile_inner(original, *rest, **kwargs))

    return compile_inner
