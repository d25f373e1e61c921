"""The peak memory of the generated code itself: the forward and backward fx graphs walked in
their own op order, each op's outputs allocated, each storage freed after the last use of any
value in it (what fx's code generation does: it drops every name after its last use).

The planning Graph's simulation (``simulate``) is the model the solvers plan with: one node per
forward op, one backward step per node with its gradient buffers. The generated backward also
runs ops that model does not see (the temporaries of a loss's backward, a ``zeros`` + scatter
for a slice's gradient), so its peak can sit a few percent above the simulated one. This walk
reads the graphs the runtime will execute, so it is what the measured peak is compared with.

Counted as the live-storage tracker counts (``remat.measure``): storages created during the
step, without the parameters and inputs that exist before it and without the gradients it
returns (the parameters' ``.grad``). With ``held_grads`` (``.grad`` allocated before the step:
gradient accumulation, DDP, ``zero_grad(set_to_none=False)``, ``remat.measure`` on CUDA) autograd
adds each returned gradient into its ``.grad`` only when the backward ends, so all of them are
temporaries held together until then (the CPU-size HF ResNet at "50%": left out, its 1 MB of
gradients took the step 1.18x over the budget under inductor, 1.25x in eager code).

``fused=True`` walks the graphs as inductor will run them: a pointwise or reduction value that
only pointwise or reduction ops read (directly or through views) lives inside a fused kernel
and takes no buffer; values that an extern kernel (matmul, convolution, attention, a fallback
op) reads or makes, and the graphs' outputs (saved values, gradients), are buffers. A generated
kernel writes its output over a buffer it reads for the last time at the index it writes, of the
same dtype and size (inductor's in-place reuse: in fp32 a Llama's log-softmax gradient takes the
saved logits' storage, 8 MiB of a 25 MiB peak). Around convolutions (inductor's layout
optimization): a graph input a convolution reads is copied channels-last while the convolution
runs (``fusion.uncopied_inputs``), a reshape of a channels-last value for an extern kernel is a
copy, a pooled operand gets a buffer, a scatter computes its zeros in its own buffer, and a
returned gradient whose strides are not its parameter's is copied where made (``gradlayout``).
Convolutions and bf16 matmuls count their workspaces while they run, fused or not
(``workspace``). A model of inductor's fusion, not its scheduler: ``bench/bench_compiled.py``
compares it with the measured peak of the compiled code (ViT, GPT-2, Llama and ResNet on the
CPU: to 8 bytes in most rows).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._prims_common import is_expandable_to
from torch.multiprocessing.reductions import StorageWeakRef

from .accumulate import GRAD_OF
from .dynamic import hint, is_symbolic
from .memo import recall, remember, remembered
from .workspace import has_workspace, workspace


SCALAR_BYTES = 16  # an output this small (a loss) is taken as held by the caller through the backward


@dataclass
class CodePeak:
    peak: float           # bytes, the whole step
    forward: float        # the forward graph's own peak
    saved: float          # bytes the forward hands to the backward
    backward: float       # the backward graph's peak, saved values included
    after_forward: float = 0.0  # bytes the forward leaves alive when it returns: saved values and outputs


def _tensors(val: object) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(val) if isinstance(t, torch.Tensor)]


def _storages(n: fx.Node) -> list[tuple[StorageWeakRef, int]]:
    """The storages of ``n``'s value and their sizes (a walk asks for each node's several times,
    over many splits: a third of its time was spent here before they were remembered)."""
    val = n.meta.get("val")
    kept = remembered()
    cached = kept.get((id(val), None)) if kept is not None else None
    if cached is not None and cached[0] is val:
        return cached[1]
    out, fresh = [], False
    for t in _tensors(val):
        try:
            st = t.untyped_storage()
            out.append((StorageWeakRef(st), int(hint(st.nbytes()))))  # (no guard on a symbolic size)
        except (RuntimeError, NotImplementedError):  # a storage of its own, never remembered (no aliases)
            out.append((StorageWeakRef(torch.empty(0).untyped_storage()), t.numel() * t.element_size()))
            fresh = True
    if not fresh and val is not None and kept is not None:
        kept[(id(val), None)] = (val, out)
    return out


_EXTERN = ("mm", "addmm", "bmm", "baddbmm", "_int_mm", "convolution", "convolution_backward", "scatter",
           "scatter_add", "scatter_reduce", "index_put", "index_put_", "_unsafe_index_put", "sort", "topk",
           "cat", "embedding_dense_backward",
           "inductor_seeds")  # the seeds of a step's random ops: drawn by a fallback kernel (``randint``) into a buffer


def _extern(n: fx.Node) -> bool:
    """An op inductor runs as a kernel of its own with a real output buffer (not fused)."""
    target = n.target
    if not isinstance(target, torch._ops.OpOverload):
        return n.op == "call_function" and target is not operator.getitem
    if target in _POOL_BACKWARDS:
        return _pool_backward_falls_back(n)
    known = _EXTERN_OPS.get(target)
    if known is None:
        from torch._inductor import lowering

        name = target.overloadpacket.__name__
        known = _EXTERN_OPS[target] = (name in _EXTERN or "attention" in name or "convolution" in name
                                       or target in lowering.fallbacks or target not in lowering.lowerings)
    return known


_POOL_BACKWARDS = {torch.ops.aten.avg_pool2d_backward.default: (2, 25),  # dimensions, largest window inductor
                   torch.ops.aten.avg_pool3d_backward.default: (3, 125)}  # writes as a loop of its own


def _pool_backward_falls_back(n: fx.Node) -> bool:
    """Whether an average pool's backward runs eager's kernel: inductor's lowering falls back
    where a gradient element gathers from more pooled windows than it unrolls, and remat's code
    where a window overhangs with padding counted (``inductor_fixes.exact_pool_backward``)."""
    from .inductor_fixes import overhangs

    dims, largest = _POOL_BACKWARDS[n.target]
    grad, x, kernel, stride, padding, ceil_mode, count_pad, divisor = (*n.args, n.kwargs.get("divisor_override"))[:8]
    kernel = _per_dim(kernel, dims, None)
    stride, padding = _per_dim(stride, dims, None) or kernel, _per_dim(padding, dims, 0)
    window = 1
    for k, st in zip(kernel, stride):
        window *= max(max(h // st - max(0, (h - k) // st), 1) for h in range(2 * k))
    if window > largest:
        return True
    if not (ceil_mode and count_pad and divisor is None):
        return False
    size, pooled = (list(_shape(v))[-dims:] for v in (x, grad))
    return overhangs([hint(d) for d in size], [hint(d) for d in pooled], kernel, stride, padding)


def _per_dim(v: object, dims: int, default: int | None) -> list:
    """A pooling argument as one int per dimension (aten takes ``[3]`` for ``[3, 3]``)."""
    if not v:
        return [] if default is None else [default] * dims
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * dims if len(v) == 1 else v


def _shape(v: object) -> tuple:
    val = v.meta.get("val") if isinstance(v, fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else ()


_EXTERN_OPS: dict[object, bool] = {}  # overload -> ``_extern`` (a walk asks once per node, 800 thousand times
# for a ResNet-152's planning)


_CONVOLUTIONS = frozenset({torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default})
_SCATTERS = ("scatter", "scatter_add", "scatter_reduce", "index_put", "_unsafe_index_put")


def _writes_into(u: fx.Node, n: fx.Node) -> bool:
    """Whether ``u`` is a functional scatter whose ``self`` is ``n``: inductor lowers it as a clone
    of ``self`` scattered into in place, so a ``self`` computed inline (a max-pool gradient's
    zeros) is computed straight into ``u``'s buffer and takes none of its own."""
    target = u.target
    return (isinstance(target, torch._ops.OpOverload) and target.overloadpacket.__name__ in _SCATTERS
            and bool(u.args) and u.args[0] is n)


_INLINE_SCATTERS = frozenset({torch.ops.aten.scatter.src, torch.ops.aten.scatter.value})


def _scatters_inline(u: fx.Node, n: fx.Node) -> bool:
    """Whether ``u`` is a scatter inductor lowers (no reduction: ``ir.Scatter``) reading ``n`` as its
    index or source, not its ``self``: those it loads with their code inline, so ``n`` takes no
    buffer on its account and what ``n`` reads lives until the scatter runs (Hiera's pooled query:
    the gradient of a max over 4 elements scatters by indices recomputed from the attention's
    input projection, which the code holds until then: 12% over the walk)."""
    if u.target not in _INLINE_SCATTERS or not u.args:
        return False
    own = u.args[0]
    while isinstance(own, fx.Node) and own is not n and (_is_view(own) or own.target is operator.getitem):
        own = own.args[0]
    return own is not n


def _windowed(u: fx.Node, n: fx.Node) -> bool:
    """Whether ``u`` is a windowed op (pooling, nearest upsampling, or their gradients) whose first
    operand is ``n``: inductor realizes that operand (``realize_hint``: its elements are read
    several times) when its fused code reads more than one buffer (a ResNet's stem ReLU, read
    by the max pool recomputed in the backward)."""
    target = u.target
    if not isinstance(target, torch._ops.OpOverload) or not u.args or u.args[0] is not n:
        return False
    name = target.overloadpacket.__name__
    return "pool" in name or "upsample_nearest" in name


def _is_view(n: fx.Node) -> bool:
    """A view or a tuple element: no storage of its own, its readers are its base's."""
    target = n.target
    return target is operator.getitem or (isinstance(target, torch._ops.OpOverload) and bool(target.is_view))


REDUCTIONS = ("sum", "mean", "var_mean", "var", "std", "std_mean", "amax", "amin", "max", "min", "argmax",
              "argmin", "prod", "any", "all", "logsumexp")
UNROLL_REDUCTIONS = 8  # inductor's ``unroll_reductions_threshold``: a smaller reduction is inlined


def _reduction(n: fx.Node) -> bool:
    """A reduction inductor realizes as a buffer of its own (``make_reduction``): one over at least
    ``UNROLL_REDUCTIONS`` elements per output (batch norm's statistics, read again by the running
    statistics' update at the end of the forward)."""
    target = n.target
    if not isinstance(target, torch._ops.OpOverload) or target.overloadpacket.__name__ not in REDUCTIONS:
        return False

    def work() -> bool:
        outs = _tensors(n.meta.get("val"))
        ins = [t for a in n.all_input_nodes for t in _tensors(a.meta.get("val"))]
        return bool(outs and ins) and ins[0].numel() >= UNROLL_REDUCTIONS * max(outs[0].numel(), 1)
    return remember(n.meta.get("val"), ("reduction", target), work)


REALIZE_READS = 4    # inductor's ``realize_reads_threshold``: a value read again by several kernels
REALIZE_OPS = 30     # and its ``realize_opcount_threshold``: ... or long to recompute, gets a buffer
# ... or, on the CPU, computed with one of these (``StorageBox.should_realize_on_reuse``)
HEAVY_ON_CPU = frozenset({"exp", "log", "log10", "log1p", "log2", "sigmoid", "tanh", "silu"})
ALWAYS_REALIZED = frozenset({"inductor_random"})  # lowered to a buffer whatever reads it (the dropout draws)


def _heavy(n: fx.Node) -> bool:
    """An op inductor's CPU code counts as heavy: a value computed with it and read by several ops
    gets a buffer (GPT-2's tanh GELU, a softmax's exp)."""
    target = n.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    name = target.overloadpacket.__name__
    if name == "gelu":
        return n.kwargs.get("approximate") == "tanh"
    if name not in HEAVY_ON_CPU:
        return False
    ts = _tensors(n.meta.get("val"))
    return bool(ts) and ts[0].device.type == "cpu"


def fused_values(graph: fx.Graph, kernel_local: set[fx.Node] | None = None) -> set[fx.Node]:
    """The values inductor keeps inside fused kernels (module docstring): no buffer of their own.
    ``kernel_local``: filled with those among them that inductor realizes and its scheduler then
    fuses away (``_kernel_local``), where the walk takes a fusion to happen.

    As inductor's lowering decides (``StorageBox.mark_reuse``), a value gets a buffer when it is
    an output, an extern kernel makes or reads it (not a concatenation reading it alone, through
    views: ``_concatenated_through_views``), or several ops read it and the fused code that
    makes it loads more than ``REALIZE_READS`` buffers or runs more than ``REALIZE_OPS`` ops (else
    each reader recomputes it inline), or on the CPU when several ops read it and its fused code
    runs a heavy op (``_heavy``), or it is a reduction (``_reduction``) or a random draw
    (``ALWAYS_REALIZED``). Views and tuple elements pass their readers on to their base and read
    what their base reads."""
    nodes = list(graph.nodes)
    out = next(n for n in nodes if n.op == "output")
    readers: dict[fx.Node, list[fx.Node]] = {}  # non-view readers, through views
    for n in reversed(nodes):
        mine: list[fx.Node] = []
        for u in n.users:
            mine.extend(readers.get(u, []) if _is_view(u) else [u])
        readers[n] = mine
    buffer: dict[fx.Node, bool] = {}
    loads: dict[fx.Node, frozenset] = {}    # buffers the fused code making n reads
    ops: dict[fx.Node, int] = {}
    heavy: dict[fx.Node, bool] = {}  # the fused code making n runs a heavy op (``_heavy``)
    reused: dict[fx.Node, bool] = {}  # realized only for being read several times
    for n in nodes:
        if n.op != "call_function":
            loads[n], ops[n] = frozenset([n]), 0
            continue
        heavy[n] = _heavy(n) or any(heavy.get(a, False) for a in n.all_input_nodes if not buffer.get(a, True))
        ins = n.all_input_nodes
        if _is_view(n):
            loads[n] = frozenset().union(*(loads[a] for a in ins)) if ins else frozenset()
            ops[n] = sum(ops[a] for a in ins)
            buffer[n] = False
            continue
        if _extern(n) or _reduction(n) or _always_realized(n):  # a buffer whatever reads it
            buffer[n], loads[n], ops[n] = True, frozenset([n]), 0
            continue
        loads[n] = frozenset().union(*(frozenset([a]) if buffer.get(a, True) else loads[a] for a in ins))
        ops[n] = 1 + sum(0 if buffer.get(a, True) else ops[a] for a in ins)
        mine = readers[n]
        inline = _concatenated_through_views(n, mine)
        buffer[n] = (out in mine or any(_extern(u) and not _writes_into(u, n) and not _scatters_inline(u, n)
                                        and not inline for u in mine)
                     or (len(loads[n]) > 1 and any(_windowed(u, n) for u in n.users)))
        if not buffer[n] and len(mine) > 1 and (len(loads[n]) > REALIZE_READS or ops[n] > REALIZE_OPS or heavy[n]):
            buffer[n] = reused[n] = True
        if buffer[n]:
            loads[n], ops[n] = frozenset([n]), 0
    inside = {n for n, b in buffer.items() if not b and not _is_view(n)}
    local = _kernel_local(nodes, inside, reused, readers)
    if kernel_local is not None:
        kernel_local.update(local)
    return inside | local


def _concatenated_through_views(n: fx.Node, readers: list[fx.Node]) -> bool:
    """Whether a concatenation is ``n``'s only reader, through views: inductor's ``cat`` copies a
    view of a value not yet realized into its slice with the value's code inline
    (``ConcatKernel.realize_into``), where the ``cat`` runs, so ``n`` takes no buffer and what it
    reads lives until then (Qwen3-Next's gated norm gradient, a part of its projection's
    gradient: the code held 48 KiB more than the walk that counted it as a buffer made early)."""
    return (len(readers) == 1 and readers[0].target is torch.ops.aten.cat.default
            and readers[0] not in n.users)


def _kernel_local(nodes: list[fx.Node], inside: set[fx.Node], reused: dict[fx.Node, bool],
                  readers: dict[fx.Node, list[fx.Node]]) -> set[fx.Node]:
    """Values realized for their several readers (``fused_values``) that every reader reads inside
    one pointwise kernel of their own size: the scheduler fuses the two kernels and drops the
    buffer, read only inside the fused one (``remove_kernel_local_buffers``). A SiLU's backward
    reads its sigmoid twice, both in the kernel of its gradient: one buffer counted that the code
    never allocates was 4% of a tiny Llama's peak. Not where that kernel computes a part of a
    concatenation into its buffer (a fused gate-up projection's gradient: the sigmoid keeps its
    buffer)."""
    if not reused:  # (most walks: no pass over the graph for it)
        return set()
    sinks: dict[fx.Node, frozenset] = {}  # the kernels (buffers made) each value is computed in
    for n in reversed(nodes):
        if n.op == "call_function" and not _is_view(n):
            sinks[n] = (frozenset().union(*(sinks.get(u, frozenset([u])) for u in readers[n]))
                        if n in inside else frozenset([n]))

    def elementwise(n: fx.Node) -> list[fx.Node] | None:  # n's readers, if all read it where they write
        out = []
        for u in n.users:
            if _is_view(u) and not _same_index_view(u):
                return None
            more = elementwise(u) if _is_view(u) else [u] if _numel(u) == _numel(n) else None
            if more is None:
                return None
            out += more
        return out

    local = set()
    for n in reused:
        mine = elementwise(n)
        kernels = frozenset().union(*(sinks.get(u, frozenset([u])) for u in mine or ()))
        if mine and len(kernels) == 1 and all(u in inside or u in kernels for u in mine):
            (k,) = kernels
            if (k.op == "call_function" and not _extern(k) and _numel(k) == _numel(n) is not None
                    and not any(u.target is torch.ops.aten.cat.default for u in k.users)):
                local.add(n)  # (a concatenation's part, computed into its buffer, is not fused with it)
    return local


def _numel(n: fx.Node) -> int | None:
    """Elements of a node's one tensor (None: several, none, or a symbolic count)."""
    ts = _tensors(n.meta.get("val"))
    count = ts[0].numel() if len(ts) == 1 else None
    return count if isinstance(count, int) else None


def _always_realized(n: fx.Node) -> bool:
    target = n.target
    return isinstance(target, torch._ops.OpOverload) and target.overloadpacket.__name__ in ALWAYS_REALIZED


def _fold_primal_kernels(nodes: list[fx.Node], inside: set[fx.Node]) -> list[fx.Node]:
    """``nodes`` with each kernel that reads only parameters (a recomputed weight cast) moved up
    to the first kernel after the last extern one (matmul, attention) before it: inductor fuses
    it there (measured on the CPU: a Llama lm_head cast computed inside the loss's backward
    kernel, the backward's first), so its buffer is alive while that kernel's is made."""
    out: list[fx.Node] = []
    start: int | None = None  # index in ``out`` of the first kernel since the last extern one
    for n in nodes:
        kernel = n.op == "call_function" and n not in inside and not _is_view(n)
        params = kernel and n.all_input_nodes and all(
            a.op == "placeholder" and a.name.startswith("primals") for a in n.all_input_nodes)
        if params and start is not None:
            out.insert(start, n)
            start += 1
            continue
        if kernel and _extern(n):
            start = None
        elif kernel and start is None:
            start = len(out)
        out.append(n)
    return out


def _addmm_add(mm: fx.Node) -> fx.Node | None:
    """The add inductor folds ``mm`` into, if any: its post-grad pass rewrites ``add(mm(a, b), c)``
    as ``addmm(c, a, b)`` where the add stands (``fx_passes.post_grad.addmm``: the matmul read by
    that add alone, ``c`` a tensor of one dtype with ``a`` and ``b`` that expands to the product;
    on a GPU not when only pointwise ops read the sum). GPT-2's tied embedding: the lm_head's
    weight gradient, added to the embedding's at the backward's end, is computed there, and the
    logits' gradient it reads lives until then (16 KiB under the measured peak of a 0.29 MB
    step)."""
    aten = torch.ops.aten
    if mm.target is not aten.mm.default or len(mm.users) != 1:
        return None
    (add,) = mm.users
    if add.target is not aten.add.Tensor or add.kwargs or len(add.args) != 2:
        return None
    inp = add.args[1] if add.args[0] is mm else add.args[0]
    vals = [a.meta.get("val") if isinstance(a, fx.Node) else None for a in (inp, *mm.args, mm)]
    if inp is mm or not all(isinstance(v, torch.Tensor) for v in vals):
        return None
    c, a, b, product = vals
    if not c.dtype == a.dtype == b.dtype or not is_expandable_to(c.shape, product.shape):
        return None
    if c.device.type != "cpu":
        from torch._inductor.utils import is_pointwise_use

        if all(is_pointwise_use(u) for u in add.users):
            return None
    return add


def _addmm_late(nodes: list[fx.Node]) -> list[fx.Node]:
    """``nodes`` with each matmul inductor folds into an add (``_addmm_add``) moved to just before it."""
    late: dict[fx.Node, list[fx.Node]] = {}
    for n in nodes:
        if n.op == "call_function" and (add := _addmm_add(n)) is not None:
            late.setdefault(add, []).append(n)
    if not late:
        return nodes
    moved = {m for ms in late.values() for m in ms}
    out: list[fx.Node] = []
    for n in nodes:
        if n not in moved:
            out.extend(late.get(n, []))
            out.append(n)
    return out


def _concat_parts(nodes: list[fx.Node], inside: set[fx.Node], keep: set[fx.Node],
                  pos: dict[fx.Node, int]) -> dict[fx.Node, fx.Node]:
    """The parts of each concatenation that inductor computes straight into its buffer (part ->
    ``cat``): a ``cat`` is no kernel but a buffer its parts are written into (``ir.ConcatKernel``),
    each part a generated kernel whose layout nothing fixed before (no extern kernel read it
    first; not an output), computed into its slice (``realize_into``). The buffer exists from the
    first part's kernel on, while what the parts read still lives (a Mixtral expert's gate and up
    gradients: 128 KiB above the walk's peak, 7.8% over a bf16 plan's budget), and the parts
    take no buffers of their own."""
    cat = torch.ops.aten.cat.default
    parts: dict[fx.Node, fx.Node] = {}
    for n in nodes:
        if n.target is not cat or not n.args or not isinstance(n.args[0], (list, tuple)) or n in keep:
            continue
        ins = [a for a in n.args[0] if isinstance(a, fx.Node)]
        for a in ins:
            if (ins.count(a) == 1 and a not in parts and a.op == "call_function" and a not in inside
                    and a not in keep and not _is_view(a) and not _extern(a)
                    and not any(_extern(u) and pos.get(u, len(nodes)) < pos[n] for u in a.users if u is not n)):
                parts[a] = n
    return parts


_FLAT_VIEWS = ("view", "_unsafe_view", "reshape", "squeeze", "unsqueeze", "alias")


def _same_index_view(n: fx.Node) -> bool:
    """A view that reads its base at the index it is read at (a reshape of a contiguous value, a
    tuple element): a kernel reading through it may write its output over the base."""
    target = n.target
    return target is operator.getitem or (
        isinstance(target, torch._ops.OpOverload) and target.overloadpacket.__name__ in _FLAT_VIEWS)


def _contiguous(n: fx.Node) -> torch.dtype | None:
    """The dtype of ``n``'s single contiguous tensor, else None."""
    val = n.meta.get("val")

    def work() -> torch.dtype | None:
        ts = _tensors(val)
        return ts[0].dtype if len(ts) == 1 and ts[0].is_contiguous() else None
    return remember(val, "contiguous", work)


def _reads(n: fx.Node, inside: set[fx.Node]) -> dict[fx.Node, bool]:
    """The buffers (or views of them) the kernel making ``n`` loads, through the fused values it
    computes inline, each with whether every load of it is at the index the kernel writes (no
    view that moves elements on the way)."""
    out: dict[fx.Node, bool] = {}
    seen: set[fx.Node] = set()
    stack = list(n.all_input_nodes)
    while stack:
        a = stack.pop()
        if a in seen:
            continue
        seen.add(a)
        base, same = a, True
        while _is_view(base) and base.all_input_nodes:
            same = same and _same_index_view(base)
            base = base.all_input_nodes[0]
        if base in inside:
            stack.extend(base.all_input_nodes)
        else:
            out[base] = out.get(base, True) and same
    return out


def layout_optimized(gm: fx.GraphModule) -> bool:
    """Whether inductor runs this forward's convolutions channels-last
    (``GraphLowering.decide_layout_opt``: any convolution on the CPU; on a GPU, graphs with enough
    of them); its backward reads the forward's layouts."""
    from torch._inductor.graph import GraphLowering

    try:
        return bool(GraphLowering.decide_layout_opt(gm, is_inference=False))
    except Exception:  # noqa: BLE001 - inductor internals moved: taken as off
        return False


def fx_layout_inputs(gm: fx.GraphModule) -> frozenset[fx.Node]:
    """The 4-D dense inputs of a layout-optimized graph that are not channels-last: remat's code
    does not copy them when the graph starts, as inductor would (``fusion.uncopied_inputs``), so
    each convolution reading one copies it channels-last while it runs. Before, the copy was made
    at the start and, where the input is saved (a conv weight, the images), it was what the forward
    saved: on the CPU-size HF ResNet (bf16) 0.12 of the eager step's peak, held through the step."""
    if not layout_optimized(gm):
        return frozenset()
    out = set()
    for n in gm.graph.find_nodes(op="placeholder"):
        val = n.meta.get("val")
        if (isinstance(val, torch.Tensor) and val.dim() == 4
                and torch._prims_common.is_non_overlapping_and_dense_or_false(val)
                and not val.is_contiguous(memory_format=torch.channels_last)):
            out.add(n)
    return frozenset(out)


def conv_backwards(forward: fx.GraphModule, backward: fx.GraphModule,
                   saved: list[fx.Node]) -> dict[fx.Node, tuple[str, float]]:
    """How aten runs each convolution backward of ``backward`` in inductor's code, where inductor
    lays its operands out itself: the memory format (``workspace``'s layout) and the bytes of
    the operand copies inductor makes for it.

    Inductor decides the backward's layout optimization on the backward graph alone: on only
    where it recomputes a convolution (then every operand is channels-last; not listed here).
    Off, the operands come with their fx strides (``constrain_to_fx_strides``; a saved value
    upstream of a convolution as the layout-optimized forward made it, channels-last, and a value
    the backward computes as its kernel reads: ``laid_out``), then
    (``convolution_backward_lowering``) the input and output gradient are laid out in the
    stride order of the weight gradient that aten's meta function gives for them, the output
    gradient and the weight in that of the input gradient, each a copy where it was not so
    already. Aten runs channels-last only when the input or the weight then is
    (``suggest_memory_format``). A depthwise weight gradient comes contiguous, so ConvNeXt's
    depthwise backwards run contiguous: 0.13 MB of scratch where channels-last takes 6.4 MB.
    ``saved``: the forward's values behind the backward's first placeholders."""
    from types import SimpleNamespace

    from torch._inductor.graph import GraphLowering
    from torch._inductor.ir import FlexibleLayout, get_stride_order
    from torch._prims_common import make_channels_last_strides_for, suggest_memory_format
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .costs import real_mode

    convs = list(backward.graph.find_nodes(op="call_function", target=torch.ops.aten.convolution_backward.default))
    if not convs or layout_optimized(backward):  # (walked for every plan judged: no work without them)
        return {}
    try:  # (graph inputs are not made channels-last in remat's code: ``fusion.uncopied_inputs``)
        before = ({n for n in GraphLowering.find_nodes_prefer_channels_last(SimpleNamespace(module=forward))
                   if n.op != "placeholder"} if layout_optimized(forward) else set())
    except Exception:  # noqa: BLE001 - inductor internals moved: the fx strides' layouts stand
        return {}
    made_by = dict(zip(backward.graph.find_nodes(op="placeholder"), saved))
    computed = set()  # values the backward itself computes channels-last

    def spec(v: object) -> tuple | None:
        """How ``v`` arrives: its tensor's shape, strides, dtype and device, and "fx" (as fx lays it
        out: the forward's inputs too) or "made" (computed by the layout-optimized forward, or by
        the backward from channels-last values: channels-last); None: not a 4-D tensor."""
        ts = _tensors(v.meta.get("val")) if isinstance(v, fx.Node) else []
        if len(ts) != 1 or ts[0].dim() != 4:
            return None
        made = made_by.get(v) in before if v.op == "placeholder" else v in computed
        return tuple(ts[0].shape), tuple(ts[0].stride()), ts[0].dtype, ts[0].device, "made" if made else "fx"

    def laid_out(n: fx.Node) -> None:
        """Whether ``n``, computed in the backward, comes out channels-last: a kernel's output is
        laid out as it reads its operands of its own shape (``ComputedBuffer.get_fill_order``), a
        convolution backward's input gradient as the convolution ran. A batch norm and ReLU
        recomputed from a saved channels-last convolution output feed the next convolution backward
        channels-last (HF ResNet fp32 on the CPU: seven 3x3 weight gradients came back channels-last,
        0.39 MB the walk had not counted, where their input was recomputed rather than saved)."""
        shape = _shape(n)
        if len(shape) != 4:
            return
        if n.target is operator.getitem and n.args[0] in out:
            if n.args[1] == 0 and out[n.args[0]][0] == "channels_last":
                computed.add(n)
        elif not _extern(n) and any(_shape(a) == shape and spec(a)[4] == "made"
                                    for a in n.all_input_nodes):
            computed.add(n)

    def arriving(shape: tuple, stride: tuple, dtype: torch.dtype, device: torch.device, how: str) -> torch.Tensor:
        """A fake tensor laid out as ``spec`` says it arrives."""
        if how == "made":  # a value the forward computes, saved: made channels-last (a 1-channel weight's cast too)
            return torch.empty_strided(shape, make_channels_last_strides_for(shape), dtype=dtype, device=device)
        return torch.empty_strided(shape, stride, dtype=dtype, device=device)

    def like(t: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """``t`` in the stride order of ``grad``, as ``require_stride_order`` lays it out: kept
        where its strides rise in that order over the dimensions not of size 1
        (``Layout.is_stride_ordered``), else a copy."""
        order = get_stride_order(grad.stride())
        dims = sorted((o, d) for d, o in enumerate(order) if t.shape[d] != 1)
        strides = [t.stride(d) for _, d in dims]
        if all(a <= b for a, b in zip(strides, strides[1:])):
            return t
        return torch.empty_strided(t.shape, FlexibleLayout.stride_ordered(t.shape, order), dtype=t.dtype,
                                   device=t.device)

    def decide(specs: list[tuple], rest: tuple, mask: tuple) -> tuple[str, float]:
        # as inductor asks (``conv_bwd_weight_layout``): fake tensors on the op's device, whose
        # backend choice (oneDNN on the CPU) sets the gradients' layouts
        with real_mode(), FakeTensorMode():
            came = [arriving(*s) for s in specs]
            grad, x, w = came
            if mask[1]:
                dw = torch.ops.aten.convolution_backward(grad, x, w, None, *rest, [False, True, False])[1]
                x, grad = like(x, dw), like(grad, dw)
            if mask[0]:
                dx = torch.ops.aten.convolution_backward(grad, x, w, None, *rest, [True, False, False])[0]
                grad, w = like(grad, dx), like(w, dx)
            copies = sum(t.numel() * t.element_size() for t, c in zip((grad, x, w), came) if t is not c)
            cl = torch.channels_last in (suggest_memory_format(x), suggest_memory_format(w))
        return "channels_last" if cl else "contiguous", float(copies)

    out = {}
    for n in backward.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is not torch.ops.aten.convolution_backward.default:
            laid_out(n)
            continue
        specs = [spec(a) for a in n.args[:3]]  # (each distinct one worked out once while planning)
        if any(s is None for s in specs):
            continue
        rest = tuple(tuple(a) if isinstance(a, list) else a for a in n.args[4:10])
        mask = tuple(n.args[10])
        out[n] = recall(("conv_backward", *specs, rest, mask), lambda: decide(specs, rest, mask))
    return out


def _relayout(n: fx.Node) -> bool:
    """A reshape of a 4-D value out of four dimensions that an extern kernel reads: under the
    layout optimization the value is channels-last, so the reshape is a copy (a max-pool
    gradient's indices, reshaped for its scatter: 0.26 MB at a bf16 ResNet's peak)."""
    target = n.target
    if not (isinstance(target, torch._ops.OpOverload) and target.overloadpacket.__name__ in _FLAT_VIEWS
            and n.all_input_nodes):
        return False
    src, out = _tensors(n.all_input_nodes[0].meta.get("val")), _tensors(n.meta.get("val"))
    return (len(src) == 1 and len(out) == 1 and src[0].dim() == 4 and out[0].dim() != 4
            and any(_extern(u) for u in n.users))


def _stride_ordered(size: tuple, stride: tuple, like: tuple) -> bool:
    """Whether ``stride`` runs in the order of ``like`` (dimensions of size 1 ignored, ties
    allowed): inductor's ``Layout.is_stride_ordered`` against ``get_stride_order(like)``."""
    dims = [d for d, n in enumerate(size) if n != 1]
    order = sorted(dims, key=lambda d: like[d])  # fastest first, as ``get_fill_order`` (stable)
    ranked = [stride[d] for d in order]
    return all(a <= b for a, b in zip(ranked, ranked[1:]))


def _output_copy(n: fx.Node) -> int | None:
    """Bytes of the copy inductor makes of an output that is a view of a value its own kernel
    computes, when the value's fx layout is not contiguous; else None.

    Inductor lays such a value out contiguous, then requires the output view's stride order to be
    the fx one (``GraphLowering.run_node``: ``require_stride_order``); where the view of the
    contiguous value runs in another order, the output is copied dense. For an ``expand`` the copy
    is larger than the value: Falcon's multi-query attention saves each layer's key, scaled and
    transposed, expanded to every head: 16 KB copied from a 4 KB value in each of four layers, 49 KB
    of the 115 KB by which the walk under-predicted a 0.74 MB step)."""
    chain = []
    base = n
    while _is_view(base) and base.all_input_nodes:
        if base.target is operator.getitem or len(base.all_input_nodes) > 1:
            return None
        chain.append(base)
        base = base.all_input_nodes[0]
    if not chain or base.op != "call_function" or _extern(base):
        return None
    bval, val = base.meta.get("val"), n.meta.get("val")
    if not isinstance(bval, torch.Tensor) or not isinstance(val, torch.Tensor) or bval.is_contiguous():
        return None
    try:
        t = torch.empty(bval.shape, dtype=bval.dtype, device="meta")
        for v in reversed(chain):
            t = v.target(t, *v.args[1:], **v.kwargs)
    except Exception:  # noqa: BLE001 - a view not replayable on a plain tensor: no copy modelled
        return None
    if _stride_ordered(tuple(val.shape), tuple(t.stride()), tuple(val.stride())):
        return None
    return val.numel() * val.element_size()


def _walk(graph: fx.Graph, held: dict[object, int], keep: set[fx.Node],
          uncounted: frozenset = frozenset(), aliases: dict | None = None,
          trace: list | None = None, fused: bool = False,
          donated: frozenset = frozenset(), fx_inputs: frozenset = frozenset(),
          channels_last: bool = False, convs: dict | None = None) -> tuple[float, dict[fx.Node, list]]:
    """Peak bytes while ``graph`` runs, starting with ``held`` live storages (key -> bytes).

    A node's output is an alias of an input's storage when their fake storages are the same
    (views, ``getitem``); any other output is a new storage, keyed by the node. Storages are
    freed after the last use of every node referring to them, unless a node in ``keep`` (the
    graph's outputs) refers to them. ``fused``: values inside fused kernels (``fused_values``)
    take no storage, and what they read lives until the kernel that makes a buffer from them runs;
    and a generated kernel writes its output over a buffer it reads for the last time when the two
    have one dtype and size (inductor's ``decide_inplace_update``): one made in this
    graph, or a held one in ``donated`` (saved values the backward owns). ``fx_inputs``: placeholders
    in their fx layout that a convolution copies channels-last while it runs (``fx_layout_inputs``).
    A convolution's or bf16 matmul's own temporaries count while it runs (``workspace``;
    ``channels_last``: its operands arrive channels-last; ``convs``: the convolution backwards
    whose layout inductor decides, with the bytes of the operand copies it makes for them,
    ``conv_backwards``).
    Returns the peak and each node's storage keys (None: made before the step, or not counted).
    """
    nodes = list(graph.nodes)
    inside = fused_values(graph) if fused else set()
    if fused:
        nodes = _addmm_late(_fold_primal_kernels(nodes, inside))
    pos = {n: i for i, n in enumerate(nodes)}
    concat = _concat_parts(nodes, inside, keep, pos) if fused else {}
    cats = set(concat.values())
    made: set[object] = set()  # concatenation buffers allocated
    # a value inside a fused kernel is computed when the kernel making a buffer from it runs:
    # what it reads lives until then (``until``: the position of the last such kernel)
    until: dict[fx.Node, int] = {}
    # outputs inductor copies (``_output_copy``): new storages made where they stand
    copies = {n: b for n in keep if fused and (b := _output_copy(n)) is not None}
    for n in reversed(nodes):
        if n in copies:
            until[n] = pos[n]
        elif n in concat:  # the parts run in an order inductor's scheduler picks: what they read lives to the end
            until[n] = pos[concat[n]]
        elif n in inside or (fused and _is_view(n)):
            until[n] = max([pos[n]] + [until.get(u, pos.get(u, len(nodes))) for u in n.users])
    last: dict[fx.Node, int] = {}
    for i, n in enumerate(nodes):
        for a in n.all_input_nodes:  # a tuple's elements hold their storages themselves: the tuple is
            # dropped once unpacked (a convolution's input gradient is not kept for its weight's)
            last[a] = max(last.get(a, -1), i if n.target is operator.getitem else until.get(n, i))
    due: dict[int, list[fx.Node]] = {}
    for a, i in last.items():
        due.setdefault(i, []).append(a)
    key_of: dict[fx.Node, list[object]] = {}
    aliases = aliases or {}  # (placeholder, j) -> the held key of the storage it shares
    live = dict(held)
    refs: dict[object, int] = {}
    cur = float(sum(live.values()))
    peak = cur
    dtype_of: dict[object, torch.dtype | None] = {}  # (fused) the dtype of each live storage, for ``inplace``
    for n in nodes if fused else ():
        if n.op == "placeholder":
            for j in range(len(_storages(n))):
                dtype_of[(n, j)] = _contiguous(n)

    def releases(i: int, n: fx.Node) -> dict[object, int]:
        """Storages whose last reader is step ``i`` (the references it drops, by key)."""
        drop: dict[object, int] = {}
        for a in due.get(i, []) + ([n] if n not in last else []):
            if last.get(a, i) != i or a in keep:
                continue
            for k in key_of.get(a, []):
                if k is not None and k in refs:
                    drop[k] = drop.get(k, 0) + 1
        return drop

    def inplace(i: int, n: fx.Node, size: int, taken: set) -> object | None:
        """The storage a generated kernel making ``n`` writes over, if any (see the docstring)."""
        dtype = _contiguous(n)
        if dtype is None or not size:
            return None
        drop = releases(i, n)
        for a, same in _reads(n, inside).items():
            for k in key_of.get(a, []) if same else []:
                if (k is None or k in taken or k not in live or drop.get(k) != refs.get(k)
                        or dtype_of.get(k) != dtype or not 0.95 * live[k] <= size <= live[k]):
                    continue
                if k in held and k not in donated:
                    continue
                return k
        return None

    for i, n in enumerate(nodes):
        if n.op == "output":
            break
        if n.op == "placeholder":  # held: handed in by the forward; else made before the step (None)
            key_of[n] = [aliases.get((n, j), (n, j) if (n, j) in held else None) for j in range(len(_storages(n)))]
        elif n.op in ("call_function", "call_method", "call_module", "get_attr"):
            by_ref = {ref: k for a in n.all_input_nodes for k, (ref, _) in zip(key_of.get(a, []), _storages(a))
                      if k is None or k in live}
            keys = []
            kernel = fused and n.op == "call_function" and n not in inside and not _is_view(n) and not _extern(n)
            copy = (channels_last and _relayout(n)) or n in copies
            taken: set = set()
            returned: set[int] = set()  # outputs the step returns (not counted here nor in the op's workspace)
            into = concat.get(n)  # computed into a slice of a concatenation's buffer
            for j, (ref, size) in enumerate(_storages(n)):
                reuse = (inplace(i, n, size, taken) if kernel and into is None and ref not in by_ref
                         and ref not in uncounted else None)
                if into is not None or n in cats:  # the buffer, made by the first part computed
                    k = (into or n, 0)
                    if k not in live and k not in made:
                        made.add(k)
                        live[k] = _storages(into or n)[0][1]
                        dtype_of[k] = _contiguous(into or n)
                        cur += live[k]
                    keys.append(k)
                elif ref in by_ref and not copy:  # a view of an input, or getitem
                    keys.append(by_ref[ref])
                elif n.op == "get_attr" or ref in uncounted:
                    keys.append(None)  # a constant of the module, or a gradient the step returns
                    returned.add(j)
                elif reuse is not None:  # written over a buffer read for the last time
                    taken.add(reuse)
                    keys.append(reuse)
                else:
                    k = (n, j)
                    size = 0 if n in inside else copies.get(n, size)
                    live[k] = size
                    if fused:
                        dtype_of[k] = _contiguous(n)
                    cur += size
                    keys.append(k)
            key_of[n] = keys
            layout, relaid = (convs or {}).get(n, ("channels_last" if channels_last else "fx", 0.0))
            if channels_last and fx_inputs and n.target in _CONVOLUTIONS and n not in (convs or {}):
                relaid += sum(_storages(a)[0][1] for a in n.args[:3] if isinstance(a, fx.Node) and a in fx_inputs)
            at = cur + relaid + (workspace(n, layout, frozenset(returned)) if has_workspace(n, fused) else 0.0)
            peak = max(peak, at)
            if trace is not None:  # (name, bytes live while the op runs)
                trace.append((n.name, at))
        for k in key_of.get(n, []):
            if k is not None:
                refs[k] = refs.get(k, 0) + 1
        # free what is read for the last time by this step (or the fused kernel it is part of),
        # and this node if nothing reads it
        for a in due.get(i, []) + ([n] if n not in last else []):
            if last.get(a, i) != i or a in keep:
                continue
            for k in key_of.get(a, []):
                if k is None or k not in refs:
                    continue
                refs[k] -= 1
                if refs[k] == 0 and k in live:
                    cur -= live.pop(k)
    return peak, key_of


def returned_channels_last(a: fx.Node, convs: dict, channels_last: bool) -> bool:
    """Whether inductor's backward returns the gradient ``a`` channels-last where its parameter is
    not (``_restrided``): made by a convolution backward it runs channels-last
    (``convs``, ``conv_backwards``), or, under the layout optimization (``channels_last``), by any
    kernel; not where the graph copies it into a memory format itself (``gradlayout``)."""
    if a.target is torch.ops.aten.clone.default and a.kwargs.get("memory_format") is not None:
        return False
    made = a.args[0] if a.target is operator.getitem else None
    layout = convs[made][0] if made in convs else "channels_last" if channels_last else "fx"
    return layout == "channels_last" and _restrided(a)


def inductor_restrided(forward: fx.GraphModule, backward: fx.GraphModule, num_fwd_outputs: int) -> list[int]:
    """Positions of the gradients inductor's backward returns channels-last (``returned_channels_last``)."""
    out_f = next(iter(forward.graph.find_nodes(op="output")))
    saved = [a for a in list(out_f.args[0])[num_fwd_outputs:] if isinstance(a, fx.Node)]
    channels_last = layout_optimized(forward)
    convs = conv_backwards(forward, backward, saved)
    outs = _flat_outputs(next(iter(backward.graph.find_nodes(op="output"))))
    return [j for j, a in enumerate(outs) if isinstance(a, fx.Node) and returned_channels_last(a, convs, channels_last)]


def _restrided(n: fx.Node) -> bool:
    """A gradient inductor returns channels-last (layout optimization) for a 4-D parameter whose
    kernel is more than 1x1: its strides are not the parameter's, so autograd would copy it into
    ``.grad`` when the backward returns, and ``gradlayout`` copies it where made instead (ResNet,
    CPU: 0.39 MB of 3x3 weight gradients held at a 3.28 MB peak until it did)."""
    ts = _tensors(n.meta.get("val"))
    return len(ts) == 1 and ts[0].dim() == 4 and ts[0].shape[2] * ts[0].shape[3] > 1


def _flat_outputs(out: fx.Node) -> list:
    """The backward's outputs in order: one gradient (or None) per primal of the forward."""
    args = out.args[0]
    return list(args) if isinstance(args, (tuple, list)) else [args]


def _breaks_layout_contract(grad: fx.Node, primal: fx.Node) -> bool:
    """Whether autograd copies this returned gradient into ``.grad`` instead of taking it:
    ``AccumulateGrad`` takes a gradient whose strides are its parameter's (over the dimensions
    longer than one) and clones any other, so the returned one is a temporary (a convolution
    reading a channels-last input returns its weight's gradient channels-last: 131 KB of an HF
    ConvNeXt V2's 1.96 MB peak, which the walk had under-predicted by that much)."""
    g, p = grad.meta.get("val"), primal.meta.get("val")
    if not isinstance(g, torch.Tensor) or not isinstance(p, torch.Tensor) or g.shape != p.shape:
        return False
    return any(size > 1 and gs != ps for size, gs, ps in zip(g.shape, g.stride(), p.stride()))


def code_peak(forward: fx.GraphModule, backward: fx.GraphModule, num_fwd_outputs: int,
              fused: bool = False, unused: frozenset[str] = frozenset(), traces: dict | None = None,
              held_grads: bool = False) -> CodePeak:
    """Peak live bytes of one step of the two graphs (see the module docstring; ``fused``: as
    inductor runs them; ``unused``: tangents that arrive as None, no bytes, ``tangents``;
    ``held_grads``: the returned gradients are temporaries until the backward ends).
    ``traces``: filled with each graph's (node name, bytes live while it runs) and the ``user``
    bytes the backward's are counted without, and (``fused``) each graph's ``local`` values, taken as
    fused away (``fusionguard``)."""
    if traces is not None:
        traces.update(forward=[], backward=[])
    out_f = next(iter(forward.graph.find_nodes(op="output")))
    f_outs = [a for a in out_f.args[0] if isinstance(a, fx.Node)]
    channels_last = fused and layout_optimized(forward)
    inputs = fx_layout_inputs(forward) if channels_last else frozenset()
    fwd_peak, fwd_keys = _walk(forward.graph, {}, set(f_outs), fused=fused, fx_inputs=inputs,
                               channels_last=channels_last, trace=None if traces is None else traces["forward"])
    # the backward receives the saved values (its first placeholders); everything else the
    # forward made is gone but what the caller holds. Saved views of parameters or inputs are no
    # new memory.
    outs = list(out_f.args[0])
    saved_nodes = [a for a in outs[num_fwd_outputs:] if isinstance(a, fx.Node)]
    counted: dict[object, int] = {}
    for a in outs:
        if isinstance(a, fx.Node):
            copy = _output_copy(a) if fused else None
            for k, (_, size) in zip(fwd_keys.get(a, []), _storages(a)):
                if k is not None:
                    counted[k] = size if copy is None else copy
    user_keys = {k for a in outs[:num_fwd_outputs] if isinstance(a, fx.Node) for k in fwd_keys.get(a, [])
                 if k is not None}
    # the caller keeps the loss; other outputs (logits) are usually gone by the backward
    # (``loss = model(**batch).loss; loss.backward()``), unless the backward holds them itself
    by_caller = {k for k in user_keys if counted[k] <= SCALAR_BYTES}
    user = sum(counted[k] for k in by_caller)
    placeholders = list(backward.graph.find_nodes(op="placeholder"))
    held: dict[object, int] = {}
    donated: set[object] = set()  # saved values only the backward holds: inductor may write over them
    shared: set[object] = set()  # saved values another saved value is a view of
    first: dict[object, object] = {}
    aliases: dict[object, object] = {}
    # sizes of a dynamic-shape graph are the last values the forward saves and the backward's
    # first inputs (AOTAutograd's order); they own no storage
    sizes = sum(1 for a in saved_nodes if is_symbolic(a))
    for p, a in zip(placeholders[sizes:], saved_nodes[:len(saved_nodes) - sizes]):
        for j, k in enumerate(fwd_keys.get(a, [])):
            if k is None or k in by_caller:
                continue
            if k in first:  # a second view of one storage: the same held bytes, and not donated
                aliases[(p, j)] = first[k]  # (``inductor_fixes.unaliased_donations``)
                shared.add(first[k])
            else:
                first[k] = (p, j)
                held[(p, j)] = counted[k]
                if k not in user_keys:
                    donated.add((p, j))
    donated -= shared
    for p in placeholders[len(saved_nodes):]:  # tangents: the loss's gradient, made by the caller
        if p.name in unused or GRAD_OF in p.meta:  # (a parameter's .grad, made before the step: ``accumulate``)
            continue
        for j, (_, size) in enumerate(_storages(p)):
            held[(p, j)] = size
    out_b = next(iter(backward.graph.find_nodes(op="output")))
    grads = {a for a in pytree.tree_leaves(out_b.args) if isinstance(a, fx.Node)}
    convs = conv_backwards(forward, backward, saved_nodes) if fused else {}

    primals = list(forward.graph.find_nodes(op="placeholder"))
    copied_out = set() if fused else {a for j, a in enumerate(_flat_outputs(out_b)) if isinstance(a, fx.Node)
                                      and j < len(primals) and _breaks_layout_contract(a, primals[j])}
    returned = frozenset() if held_grads else frozenset(
        ref for a in grads if not returned_channels_last(a, convs, channels_last) and a not in copied_out for ref, _ in _storages(a))
    bwd_peak, _ = _walk(backward.graph, held, grads, returned, aliases, fused=fused, donated=frozenset(donated),
                        channels_last=channels_last, convs=convs, trace=None if traces is None else traces["backward"],
                        fx_inputs=frozenset(p for p, a in zip(placeholders[sizes:], saved_nodes[:len(saved_nodes) - sizes])
                                            if a in inputs))
    if traces is not None:
        traces["user"] = user
        if fused:  # the values the walk takes inductor's scheduler to fuse away (``fusionguard``)
            traces["local"] = {}
            for part, gm in (("forward", forward), ("backward", backward)):
                local: set[fx.Node] = set()
                fused_values(gm.graph, local)
                traces["local"][part] = frozenset(n.name for n in local)
    return CodePeak(peak=max(fwd_peak, bwd_peak + user), forward=fwd_peak, saved=float(sum(held.values())),
                    backward=bwd_peak + user, after_forward=float(sum(counted.values())))
