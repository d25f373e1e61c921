"""The generated code's own peak as inductor runs it (``codepeak.fused_values``): which values
live inside fused kernels, on a hand-sized graph."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from remat.compiled.codepeak import REALIZE_READS, _storages, fused_values
from remat.measure import cpu_allocations, replay_peak


def _graph(f, *shapes):
    return make_fx(f, tracing_mode="fake")(*(torch.randn(s) for s in shapes)).graph


def test_pointwise_chains_fuse_and_buffers_stay_where_kernels_need_them():
    def f(x, w):
        a = x.sin()              # read only by cos: inside a kernel
        b = a.cos()              # read by a matmul (an extern kernel): a buffer
        c = torch.mm(b, w)       # made by one: a buffer
        d = c * 3 + 1            # read by the sum and by div, cheap: each recomputes it inline
        e = d.sum(1, keepdim=True)
        return d / e             # an output: a buffer

    names = {n.name for n in fused_values(_graph(f, (4, 4), (4, 4)))}
    assert names == {"sin", "mul", "add", "sum_1"}


def test_on_the_cpu_a_value_made_with_a_heavy_op_and_read_twice_gets_a_buffer():
    """Inductor's CPU code stores a value several ops read when its code runs exp, log, tanh,
    sigmoid (``should_realize_on_reuse``): the exp read by the sum and the division gets a buffer
    (inductor writes it over the matmul's), the same code without the exp keeps it inline."""
    def f(heavy):
        def g(x, w):
            c = torch.mm(x, w)
            d = c.exp() if heavy else c * 3 + 1
            return d / d.sum(1, keepdim=True)
        return g

    assert "exp" not in {n.name for n in fused_values(_graph(f(True), (4, 4), (4, 4)))}
    assert {"mul", "add"} <= {n.name for n in fused_values(_graph(f(False), (4, 4), (4, 4)))}


def test_a_heavy_value_every_reader_reads_in_one_kernel_of_its_size_takes_no_buffer():
    """A SiLU's backward reads its sigmoid twice, both inside the kernel making its gradient:
    inductor realizes the sigmoid (``should_realize_on_reuse``), then the scheduler fuses the two
    kernels and drops the buffer only the fused one reads. The walk's peak is that of inductor's
    code (measured); read by a reduction as well, it keeps its buffer."""
    from remat.compiled.codepeak import _walk

    def silu_backward(x, w, grad, w2):
        h = torch.mm(x, w)
        s = h.sigmoid()
        return torch.mm(grad * s * (1 + h * (s.neg() + 1)), w2)

    def also_summed(x, w, grad, w2):
        h = torch.mm(x, w)
        s = h.sigmoid()
        return torch.mm(grad * s * (1 + h * (s.neg() + 1)), w2), s.sum(0)

    shapes = (64, 64), (64, 64), (64, 64), (64, 64)
    graph = _graph(silu_backward, *shapes)
    assert "sigmoid" in {n.name for n in fused_values(graph)}
    assert "sigmoid" not in {n.name for n in fused_values(_graph(also_summed, *shapes))}
    out = next(n for n in graph.nodes if n.op == "output")
    walked, _ = _walk(graph, {}, set(out.all_input_nodes), fused=True)
    torch._dynamo.reset()
    compiled = torch.compile(silu_backward, backend="inductor", fullgraph=True)
    args = [torch.randn(s) for s in shapes]
    compiled(*args)
    events, _ = cpu_allocations(lambda: compiled(*args))
    torch._dynamo.reset()
    assert replay_peak(events) == walked == 2 * 64 * 64 * 4  # h (the gradient written over it), the output


def test_a_dropout_draw_always_gets_a_buffer():
    """``prims.inductor_random`` (a dropout's draw under torch.compile) is realized where it is
    lowered: its buffer lives until its last reader, though only a comparison reads it (GPT-2's
    recomputed dropouts: nine such buffers, 2.4 MB, alive across the backward); the seeds are
    drawn by a fallback kernel into a buffer of their own."""
    def f(x):
        seeds = torch.ops.prims.inductor_seeds.default(1, torch.device("cpu"))
        seed = torch.ops.prims.inductor_lookup_seed.default(seeds, 0)
        draw = torch.ops.prims.inductor_random.default([8, 8], seed, "rand")
        return x * (draw > 0.1)

    inside = {n.name for n in fused_values(_graph(f, (8, 8)))}
    assert "inductor_random" not in inside and "inductor_seeds" not in inside
    assert {"inductor_lookup_seed", "gt"} <= inside


def test_a_value_several_kernels_read_gets_a_buffer_when_its_code_loads_many():
    def f(k):
        def g(*xs):
            a = sum(xs[1:], xs[0])    # one fused kernel loading k inputs
            return a.sin(), a.cos()   # two readers
        return g

    few = {n.name for n in fused_values(_graph(f(REALIZE_READS), *[(8,)] * REALIZE_READS))}
    many = {n.name for n in fused_values(_graph(f(REALIZE_READS + 1), *[(8,)] * (REALIZE_READS + 1)))}
    last = f"add_{REALIZE_READS - 2}"
    assert last in few
    assert f"add_{REALIZE_READS - 1}" not in many and last in many  # only the value read twice


def test_views_pass_their_readers_to_their_base():
    def f(x, w):
        a = x.sin()
        return torch.mm(a.t(), w)  # the matmul reads a through a view: a needs a buffer

    assert "sin" not in {n.name for n in fused_values(_graph(f, (4, 4), (4, 4)))}


def test_a_value_a_concatenation_reads_through_a_view_is_computed_in_its_slice():
    """``cat`` copies a view of a value no kernel made yet into its slice, the value's code inline:
    the value takes no buffer. Read by the concatenation directly, it is a part with a buffer of
    its own kind (``_concat_parts``); read by anything else too, it is a buffer as before."""
    def f(direct, also):
        def g(x, y):
            a = x.sin() * 2               # a pointwise value
            part = a if direct else a.view(8, 2)
            out = torch.cat([part, y], 1)
            return (out, a.cos()) if also else out
        return g

    def inside(*how):
        return {n.name for n in fused_values(_graph(f(*how), (4, 4), (8, 2) if not how[0] else (4, 4)))}

    assert "mul" in inside(False, False)
    assert "mul" not in inside(True, False)
    assert "mul" not in inside(False, True)


def test_a_scatter_loads_its_index_and_source_inline():
    """Inductor lowers a scatter without a reduction as a kernel that loads its index and source
    with their code inline: the max's indices (over two elements, no reduction of its own) and the
    cosine take no buffer, and the matmul they read lives until the scatter runs."""
    def f(x, w):
        a = torch.mm(x, w)
        idx = a.view(8, 2, 4).max(1, keepdim=True).indices
        return torch.zeros(8, 2, 4).scatter(1, idx, a.view(8, 2, 4).cos())

    assert {"max_1", "cos"} <= {n.name for n in fused_values(_graph(f, (8, 4), (4, 8)))}


def test_casts_fuse():
    """``prims.convert_element_type`` (autocast's casts) is a pointwise kernel, not a convolution."""
    def f(x):
        return torch.ops.prims.convert_element_type.default(x, torch.float64).sin()

    assert "convert_element_type" in {n.name for n in fused_values(_graph(f, (4, 4)))}


def test_what_a_fused_value_reads_lives_until_the_kernel_making_a_buffer_from_it_runs():
    """b = sin(a) is computed inside the kernel that makes c, after e: a is alive there."""
    from remat.compiled.codepeak import _walk

    def f(x, w):
        a = torch.mm(x, w)
        b = a.t().sin()          # fused: computed where c is (transposed: c cannot be written over a)
        e = torch.mm(w, x)
        c = b.cos()              # read by a matmul: a buffer, made from a
        return torch.mm(c[:1], e)

    graph = _graph(f, (32, 32), (32, 32))
    out = next(n for n in graph.nodes if n.op == "output")
    size = 32 * 32 * 4
    fused, _ = _walk(graph, {}, set(out.all_input_nodes), fused=True)
    plain, _ = _walk(graph, {}, set(out.all_input_nodes))
    assert fused == 3 * size             # a, e and c at once
    assert plain == 3 * size             # a, b, e: b is a buffer of its own, a freed once b is made


def test_a_weight_cast_is_counted_in_the_first_kernel_after_the_last_matmul():
    """Inductor fuses a kernel that reads only parameters into the first kernel since the last
    extern one (a Llama lm_head cast inside the loss's backward kernel): the cast's buffer is
    alive while that kernel's output is made."""
    from remat.compiled.codepeak import _walk

    def f(primals_1, tangents_1):
        a = tangents_1 * 2
        m = torch.mm(a, a)
        b = m.t() * 3             # inside c's kernel, which reads m (transposed: not in place)
        c = b + 1                 # the first kernel after the matmul: a buffer
        w = primals_1 * 5         # reads only a parameter: run with c's kernel
        return torch.mm(c[:1], w)

    graph = _graph(f, (32, 32), (32, 32))
    out = next(n for n in graph.nodes if n.op == "output")
    size = 32 * 32 * 4
    fused, _ = _walk(graph, {}, set(out.all_input_nodes), fused=True)
    assert fused == 3 * size  # m, w and c at once (in the graph's own order: never more than two)


def _kernel_over_dead_input(read):
    """a = x @ w; e = w @ x; b = read(a), a pointwise kernel and a's last reader; a row of b @ e."""
    def f(x, w):
        a = torch.mm(x, w)
        e = torch.mm(w, x)
        b = read(a)
        return torch.mm(b[:1], e)
    return f


def test_a_kernel_writes_its_output_over_a_buffer_it_reads_for_the_last_time():
    """Inductor's in-place reuse (``decide_inplace_update``): a generated kernel's output takes
    the storage of a same-size, same-dtype buffer it reads at its own index for the last time."""
    from remat.compiled.codepeak import _walk

    size = 32 * 32 * 4

    def peak(read):
        graph = _graph(_kernel_over_dead_input(read), (32, 32), (32, 32))
        out = next(n for n in graph.nodes if n.op == "output")
        return _walk(graph, {}, set(out.all_input_nodes), fused=True)[0]

    assert peak(lambda a: a.sin()) == 2 * size + 32 * 4          # b over a; then b, e and a row
    assert peak(lambda a: a.t().sin()) == 3 * size               # read transposed: a new buffer
    assert peak(lambda a: a.to(torch.int32)) == 3 * size         # another dtype: a new buffer
    assert peak(lambda a: a.view(16, 64).sin().view(32, 32)) == 2 * size + 32 * 4  # a reshape reads in place


def test_only_donated_inputs_are_written_over():
    """A backward input is written over only when the backward owns it (a saved value, as
    AOTAutograd donates them); a tangent the caller made is not."""
    from remat.compiled.codepeak import _walk

    def f(t, w):
        e = torch.mm(w, w)
        b = t.sin()
        return torch.mm(b[:1], e)

    graph = _graph(f, (32, 32), (32, 32))
    out = next(n for n in graph.nodes if n.op == "output")
    t = next(n for n in graph.nodes if n.op == "placeholder")
    size = 32 * 32 * 4
    held = {(t, 0): size}
    kept, _ = _walk(graph, held, set(out.all_input_nodes), fused=True)
    donated, _ = _walk(graph, held, set(out.all_input_nodes), fused=True, donated=frozenset(held))
    assert kept == 3 * size
    assert donated == 2 * size + 32 * 4  # b over t; then b, e and a row


def test_a_reduction_inductor_realizes_gets_a_buffer():
    """Inductor realizes a reduction over at least ``UNROLL_REDUCTIONS`` elements per output
    (``make_reduction``): batch norm's statistics are buffers, so what they read is not kept for
    the running statistics' update at the end of the forward. A smaller one is unrolled inline."""
    from remat.compiled.codepeak import UNROLL_REDUCTIONS

    def f(x):
        return x * x.sum(1, keepdim=True)

    big = {n.name for n in fused_values(_graph(f, (4, UNROLL_REDUCTIONS)))}
    small = {n.name for n in fused_values(_graph(f, (4, UNROLL_REDUCTIONS - 1)))}
    assert "sum_1" not in big and "sum_1" in small


def _conv_graph():
    def f(x, w3, w1):  # a forward saving its convolution's inputs for the backward
        return torch.conv2d(torch.conv2d(x, w3, padding=1), w1), x, w3
    return make_fx(f, tracing_mode="fake")(torch.randn(2, 4, 8, 8), torch.randn(4, 4, 3, 3), torch.randn(4, 4, 1, 1))


def test_an_input_a_convolution_reads_is_copied_channels_last_while_it_runs():
    """With inductor's layout optimization (any convolution, on the CPU) remat's code leaves its
    graph's inputs as they come (``fusion.uncopied_inputs``): a convolution reading a 4-D input
    that is not channels-last copies it while it runs, and the saved input is the input itself,
    no new memory. A 1x1 weight already is channels-last."""
    from remat.compiled.codepeak import _walk, fx_layout_inputs

    gm = _conv_graph()
    inputs = fx_layout_inputs(gm)
    assert {n.name for n in inputs} == {"x_1", "w3_1"}
    out = next(n for n in gm.graph.nodes if n.op == "output")
    plain: list = []
    walked: list = []
    _walk(gm.graph, {}, set(out.all_input_nodes), fused=True, channels_last=True, trace=plain)
    _walk(gm.graph, {}, set(out.all_input_nodes), fused=True, channels_last=True, fx_inputs=inputs, trace=walked)
    diff = {name: b - a for (name, a), (_, b) in zip(plain, walked)}
    assert diff == {"convolution": (2 * 4 * 8 * 8 + 4 * 4 * 3 * 3) * 4, "convolution_1": 0}


def test_a_convolution_workspace_is_what_it_allocates_beyond_its_outputs(tmp_path, monkeypatch):
    """Measured once per signature on real tensors and cached on disk; other ops have none."""
    from remat.compiled import workspace as ws

    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ws, "_memo", {})
    monkeypatch.setattr(ws, "_caches", {})
    gm = _conv_graph()
    conv = next(n for n in gm.graph.nodes if "convolution" in str(n.target))
    with torch.no_grad():
        args = [torch.rand(2, 4, 8, 8), torch.rand(4, 4, 3, 3)]
        events, out = cpu_allocations(lambda: torch.ops.aten.convolution.default(*args, None, [1, 1], [1, 1],
                                                                                [1, 1], False, [0, 0], 1))
    expected = _running_peak(events) - out.untyped_storage().nbytes()
    assert ws.workspace(conv) == expected
    assert list(tmp_path.glob("workspace-*.json"))  # cached on disk
    monkeypatch.setattr(ws, "_memo", {})
    monkeypatch.setattr(ws, "_caches", {})
    monkeypatch.setattr(ws, "_measure", lambda *a: 1 / 0)  # a second build reads the cache
    assert ws.workspace(conv) == expected
    relu = _graph(lambda x: x.relu(), (4,))
    assert ws.workspace(next(n for n in relu.nodes if n.op == "call_function")) == 0.0


def test_a_matmul_workspace_is_what_it_allocates_beyond_its_output(tmp_path, monkeypatch):
    """On the CPU a bf16 matmul reorders its operands into scratch memory (oneDNN); the walk
    counts it while the matmul runs, as for a convolution."""
    from remat.compiled import workspace as ws

    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ws, "_memo", {})
    monkeypatch.setattr(ws, "_caches", {})
    for dtype in (torch.bfloat16, torch.float32):
        graph = make_fx(torch.mm, tracing_mode="fake")(torch.randn(128, 64, dtype=dtype),
                                                       torch.randn(64, 256, dtype=dtype)).graph
        mm = next(n for n in graph.nodes if n.op == "call_function")
        assert ws.has_workspace(mm)
        a, b = torch.rand(128, 64, dtype=dtype), torch.rand(64, 256, dtype=dtype)
        torch.mm(a, b)  # warm, as ``_measure`` does
        events, out = cpu_allocations(lambda: torch.mm(a, b))
        assert ws.workspace(mm) == max(_running_peak(events) - out.untyped_storage().nbytes(), 0)


def test_a_bf16_scatter_add_on_the_cpu_is_measured_for_eager_code(tmp_path, monkeypatch):
    """The backward of a gather, ``scatter_add``, accumulates a bf16 result through an fp32 copy of
    it on the CPU (the walk of a small bf16 DeBERTa-v2's step was 17% under its measured peak, from
    each of its relative-position gathers). Eager code runs ATen's kernel: measured. Inductor
    generates its own scatter: not."""
    from remat.compiled import workspace as ws

    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ws, "_memo", {})
    monkeypatch.setattr(ws, "_caches", {})
    index = torch.randint(0, 64, (32, 64))
    graph = make_fx(lambda g, i, s: torch.zeros_like(s).scatter_add(1, i, g), tracing_mode="fake")(
        torch.randn(32, 64, dtype=torch.bfloat16), index, torch.randn(32, 512, dtype=torch.bfloat16)).graph
    add = next(n for n in graph.nodes if "scatter_add" in str(n.target))
    assert ws.has_workspace(add) and not ws.has_workspace(add, fused=True)
    g, base = torch.rand(32, 64, dtype=torch.bfloat16), torch.zeros(32, 512, dtype=torch.bfloat16)
    base.scatter_add(1, index, g)  # warm, as ``_measure`` does
    events, out = cpu_allocations(lambda: base.scatter_add(1, index, g))
    expected = max(_running_peak(events) - out.untyped_storage().nbytes(), 0)
    assert expected >= 32 * 512 * 4  # the fp32 copy of the result, at least
    assert ws.workspace(add) == expected


def _running_peak(events, leave_out=()):
    """The highest running sum of (time, ptr, +-bytes) events, without the allocations at the
    pointers in ``leave_out`` that are never freed."""
    kept = [e for e in events if not (e[1] in leave_out and e[2] > 0
                                      and not any(f[1] == e[1] and f[2] < 0 and f[0] >= e[0] for f in events))]
    cur = peak = 0
    for _, _, size in kept:
        cur += size
        peak = max(peak, cur)
    return peak


def test_a_returned_weight_gradient_is_left_out_of_the_backward_convolution_peak(tmp_path, monkeypatch):
    """A weight gradient the step returns becomes ``.grad`` and is not counted by the walk; on the
    CPU it is allocated after the op's temporaries are freed, so the op's workspace with it left
    out is its peak without that allocation, minus the input gradient (not the peak minus both
    outputs, which under-counted a ResNet's backward by up to 0.1 MB)."""
    from remat.compiled import workspace as ws

    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ws, "_memo", {})
    monkeypatch.setattr(ws, "_caches", {})
    shapes = [(8, 256, 2, 2), (8, 128, 4, 4), (256, 128, 1, 1)]  # a strided 1x1 convolution of a ResNet

    def bwd(g, x, w):
        return torch.ops.aten.convolution_backward.default(g, x, w, [0], [2, 2], [0, 0], [1, 1], False, [0, 0],
                                                          1, [True, True, False])

    graph = make_fx(bwd, tracing_mode="fake")(*(torch.randn(s) for s in shapes)).graph
    node = next(n for n in graph.nodes if n.op == "call_function")
    with torch.no_grad():
        args = [torch.rand(s) for s in shapes]
        bwd(*args)
        events, (gx, gw, _) = cpu_allocations(lambda: bwd(*args))
    kept = _running_peak(events, {gw.untyped_storage().data_ptr()}) - gx.untyped_storage().nbytes()
    both = _running_peak(events) - gx.untyped_storage().nbytes() - gw.untyped_storage().nbytes()
    assert ws.workspace(node, uncounted=frozenset({1})) == kept
    assert ws.workspace(node) == max(both, 0)


def test_a_scatter_computes_its_zeros_in_its_own_buffer():
    """A max-pool gradient's ``scatter_add(zeros, ...)``: inductor clones ``self`` into the
    scatter's output, so zeros computed inline take no buffer of their own."""
    from remat.compiled.codepeak import _walk

    def f(src, idx):
        zeros = torch.full((64, 256), 0.0)  # as decomposed graphs have it
        return torch.scatter_add(zeros, 1, idx, src).sin()

    graph = make_fx(f, tracing_mode="fake")(torch.randn(64, 64), torch.randint(0, 256, (64, 64))).graph
    assert "full" in {n.name for n in fused_values(graph)}
    out = next(n for n in graph.nodes if n.op == "output")
    fused, _ = _walk(graph, {}, set(out.all_input_nodes), fused=True)
    plain, _ = _walk(graph, {}, set(out.all_input_nodes))
    assert fused == 64 * 256 * 4       # the scatter's buffer (sin is then written over it)
    assert plain == 2 * 64 * 256 * 4   # zeros and the scatter's output


def test_an_unpacked_tuple_does_not_keep_an_element_alive(monkeypatch):
    """A convolution's backward returns its input's and its weight's gradients: once both are
    unpacked, the input's is freed after its own last reader, though the weight's is returned."""
    from remat.compiled import codepeak
    from remat.compiled.codepeak import _walk

    monkeypatch.setattr(codepeak, "workspace", lambda *a: 0.0)  # this test is about the values

    def f(g, x, w, y):
        gx, gw, _ = torch.ops.aten.convolution_backward.default(g, x, w, [0], [1, 1], [1, 1], [1, 1], False,
                                                                 [0, 0], 1, [True, True, False])
        total = gx.sum()
        big = torch.mm(y, y)   # after gx's last reader
        return total, gw, big

    shapes = [(2, 4, 8, 8), (2, 4, 8, 8), (4, 4, 3, 3), (64, 64)]
    graph = make_fx(f, tracing_mode="fake")(*(torch.randn(s) for s in shapes)).graph
    out = next(n for n in graph.nodes if n.op == "output")
    grads = [n for n in out.all_input_nodes if n.name.startswith("getitem")]
    fused, _ = _walk(graph, {}, set(out.all_input_nodes), frozenset(r for n in grads for r, _ in _storages(n)),
                     fused=True)
    gx = 2 * 4 * 8 * 8 * 4
    assert fused == max(gx + 4, 4 + 64 * 64 * 4)   # gx is gone when the matmul's output is made


def test_a_channels_last_weight_gradient_is_a_temporary_until_the_backward_ends():
    """Under the layout optimization inductor returns a 3x3 weight's gradient channels-last; autograd
    copies it into ``.grad``, so the returned one counts. A 1x1 weight's strides match: not counted."""
    from remat.compiled.codepeak import _restrided

    def f(g, x, w3, w1):
        a = torch.ops.aten.convolution_backward.default(g, x, w3, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                        [False, True, False])[1]
        b = torch.ops.aten.convolution_backward.default(g, x, w1, [0], [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                                                        [False, True, False])[1]
        return a, b

    shapes = [(2, 4, 8, 8), (2, 4, 8, 8), (4, 4, 3, 3), (4, 4, 1, 1)]
    graph = make_fx(f, tracing_mode="fake")(*(torch.randn(s) for s in shapes)).graph
    out = next(n for n in graph.nodes if n.op == "output")
    w3_grad, w1_grad = out.args[0]
    assert _restrided(w3_grad) and not _restrided(w1_grad)


def test_both_walks_count_a_convolution_workspace_while_it_runs(monkeypatch):
    """Eager code's convolutions allocate their scratch memory too: the op-by-op walk counts it
    at the op, on top of what is live there, as the fused walk does."""
    from remat.compiled import codepeak
    from remat.compiled.codepeak import _walk

    gm = _conv_graph()
    out = next(n for n in gm.graph.nodes if n.op == "output")
    monkeypatch.setattr(codepeak, "workspace", lambda *a: 0.0)
    bare = {fused: _walk(gm.graph, {}, set(out.all_input_nodes), fused=fused)[0] for fused in (False, True)}
    extra = 10 ** 6  # larger than every value here: the peak is at a convolution, plus it
    monkeypatch.setattr(codepeak, "workspace", lambda *a: float(extra))
    for fused in (False, True):
        peak, _ = _walk(gm.graph, {}, set(out.all_input_nodes), fused=fused)
        assert bare[fused] < peak <= bare[fused] + extra
        assert peak > extra


def test_the_walk_leaves_the_gradients_it_does_not_count_out_of_an_ops_workspace(monkeypatch):
    """A returned weight gradient is not counted at its op, so neither is its allocation inside
    the op: the walk asks for the workspace with that output's position left out."""
    from remat.compiled import codepeak
    from remat.compiled.codepeak import _walk

    def bwd(g, x, w):
        return torch.ops.aten.convolution_backward.default(g, x, w, [0], [1, 1], [1, 1], [1, 1], False, [0, 0],
                                                          1, [True, True, False])[:2]

    graph = make_fx(bwd, tracing_mode="fake")(torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8),
                                              torch.randn(4, 4, 3, 3)).graph
    out = next(n for n in graph.nodes if n.op == "output")
    conv = next(n for n in graph.nodes if "convolution" in str(n.target))
    weight_grad = out.args[0][1]
    asked = []
    monkeypatch.setattr(codepeak, "workspace", lambda n, cl, left_out: asked.append(left_out) or 0.0)
    for returned in (frozenset(), frozenset(ref for ref, _ in _storages(weight_grad))):
        _walk(graph, {}, set(out.all_input_nodes), returned)
    assert asked == [frozenset(), frozenset({1})]
    assert codepeak.has_workspace(conv)


def test_storages_are_remembered_by_value_only_while_the_planner_walks():
    """Within ``remembering`` a value's storages are read once, for every node carrying that value
    (the planner's splits copy the joint graph's meta); outside it nothing is kept."""
    from remat.compiled import memo

    nodes = [n for n in _graph(lambda x: x.sin().view(-1), (4, 4)).nodes if n.op == "call_function"]
    sin, view = nodes
    assert _storages(sin)[0][0] == _storages(view)[0][0]  # a view shares its base's storage
    with memo.remembering():
        first = _storages(sin)
        assert _storages(sin) is first and len(memo._REMEMBERED) == 1
        sin.meta["val"] = torch.empty(3, device="meta")  # another value: read again
        assert _storages(sin)[0][1] == 12 and len(memo._REMEMBERED) == 2
    assert memo._REMEMBERED is None and _storages(view) is not _storages(view)


def test_an_ops_workspace_is_looked_up_once_per_value_and_layout_while_the_planner_walks(tmp_path, monkeypatch):
    """Building a workspace's cache key was a tenth of judging a ResNet-152 plan: within
    ``remembering`` it is built once per value, layout and uncounted outputs; outside, every time.
    The answer is the same either way."""
    from remat.compiled import memo, workspace as ws

    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    graph = make_fx(lambda x, w: torch.nn.functional.conv2d(x, w, padding=1), tracing_mode="fake")(
        torch.randn(2, 4, 8, 8), torch.randn(4, 4, 3, 3)).graph
    conv = next(n for n in graph.nodes if "convolution" in str(n.target))
    plain, cl = ws.workspace(conv), ws.workspace(conv, "channels_last")  # measured and cached on disk
    keys = []
    real = ws.op_key
    monkeypatch.setattr(ws, "op_key", lambda n: keys.append(n) or real(n))
    assert [ws.workspace(conv) for _ in range(2)] == [plain, plain] and len(keys) == 2
    with memo.remembering():
        assert [ws.workspace(conv) for _ in range(3)] == [plain] * 3 and len(keys) == 3
        assert [ws.workspace(conv, "channels_last") for _ in range(2)] == [cl] * 2 and len(keys) == 4
    assert ws.workspace(conv) == plain and len(keys) == 5


def test_a_mixed_dtype_pointwise_op_counts_its_inputs_promoted_copy(tmp_path, monkeypatch):
    """Under autocast a bf16 layer output is added to the fp32 residual stream: on the CPU the add
    copies the bf16 input to fp32 first (a small DeiT's forward peak was 15 KB over the walk). The
    eager walk counts that copy; inductor's fused kernel makes none."""
    from remat.compiled.workspace import has_workspace, workspace

    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    g = make_fx(lambda x, y: x + y, tracing_mode="fake")(torch.randn(64, 128), torch.randn(64, 128).bfloat16()).graph
    add = next(n for n in g.nodes if n.op == "call_function")
    same = make_fx(lambda x, y: x + y, tracing_mode="fake")(torch.randn(64, 128), torch.randn(64, 128)).graph
    plain = next(n for n in same.nodes if n.op == "call_function")
    assert has_workspace(add) and not has_workspace(add, fused=True) and not has_workspace(plain)
    assert workspace(add) == 64 * 128 * 4  # the bf16 input as fp32


def test_fused_attention_counts_what_its_backward_allocates(tmp_path, monkeypatch):
    """The CPU flash attention backward allocates fp32 accumulators and scratch beyond its
    outputs (a small bf16 DeiT's backward peak was 21 KB, 2.7%, over the walk there)."""
    from remat.compiled.workspace import has_workspace, workspace

    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))

    def f(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    from torch._functorch.aot_autograd import aot_function

    graphs = []

    def keep(gm, _):
        graphs.append(gm)
        return gm

    qkv = [torch.randn(2, 4, 64, 32).bfloat16().requires_grad_() for _ in range(3)]
    aot_function(f, fw_compiler=keep, bw_compiler=keep)(*qkv).sum().backward()
    backward = next(n for n in graphs[-1].graph.nodes if "attention" in str(n.target) and "backward" in str(n.target))
    assert has_workspace(backward) and workspace(backward) > 0


_OUTPUT_VIEWS = {  # an output that is a view of a value inductor's own kernel computes
    "expand of a contiguous value": lambda x: (x * 2).expand(4, 16, 32),
    "permute of a contiguous value": lambda x: (x * 2).permute(0, 2, 1),
    "expand of a permuted value": lambda x: (x.permute(0, 2, 1) * 2).expand(4, 32, 16),
    "slice of a permuted value": lambda x: (x.permute(0, 2, 1) * 2)[:, :8],
    "permuted back": lambda x: (x.permute(0, 2, 1) * 2).permute(0, 2, 1),
}


@pytest.mark.parametrize("case", list(_OUTPUT_VIEWS))
def test_an_output_view_costs_what_inductors_code_allocates_for_it(case):
    """Inductor lays a value its kernel computes out contiguous, then copies an output view of it
    whose fx stride order that layout does not give (an ``expand`` of a permuted value: a copy
    four times the value; Falcon's saved keys). The forward walk's peak equals the allocations of
    inductor's own code."""
    from remat.compiled.codepeak import _walk

    f = _OUTPUT_VIEWS[case]
    x = torch.randn(1, 16, 32)
    graph = _graph(f, (1, 16, 32))
    out = next(n for n in graph.nodes if n.op == "output")
    walked, _ = _walk(graph, {}, set(out.all_input_nodes), fused=True)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="inductor")
    compiled(x)
    with torch.no_grad():
        events, _ = cpu_allocations(lambda: compiled(x))
    # the wrapper's own allocations (dynamo's guards) are made and freed before the graph runs:
    # the code's start after the last moment nothing is allocated
    total, start = 0, 0
    for i, (_, _, size) in enumerate(events):
        total += size
        start = i + 1 if total == 0 else start
    assert walked == replay_peak(events[start:])


def test_a_saved_value_another_saved_value_views_is_not_written_over():
    """A saved value is donated to the backward (written over at its last read) unless another saved
    value is a view of it: remat's compiles do not donate those (``inductor_fixes.unaliased_donations``),
    so the walk keeps it, and the kernel reading it last takes a buffer of its own."""
    from remat.compiled.codepeak import code_peak

    def backward(s, w, t):
        e = torch.mm(w, w)
        b = (s * t).sin()
        return (torch.mm(b[:1], e),)

    def peak(with_view: bool) -> float:
        def forward(x, w):
            a = torch.mm(x, w)
            return (a.sum(), a, a.view(-1), w) if with_view else (a.sum(), a, w)

        fw = make_fx(forward, tracing_mode="fake")(torch.randn(32, 32), torch.randn(32, 32))
        saved = [torch.randn(32, 32), torch.randn(1024)] if with_view else [torch.randn(32, 32)]
        reads = (lambda s, v, w, t: backward(s, w, t)) if with_view else backward  # the view is not read
        bw = make_fx(reads, tracing_mode="fake")(*saved, torch.randn(32, 32), torch.randn(()))
        return code_peak(fw, bw, 1, fused=True).backward

    assert peak(True) - peak(False) == 32 * 32 * 4  # b in a buffer of its own, beside the kept value


def test_an_average_pool_backward_is_a_kernel_of_its_own_where_inductor_runs_eagers():
    """A pool backward is generated pointwise code, except where inductor falls back to eager's
    kernel (a gradient element gathering from more than 25 windows) and where remat's code does
    (a ``ceil_mode`` window past the input with padding counted: ``exact_pool_backward``)."""
    from remat.compiled.codepeak import _extern

    def node(side: int, kernel: int, stride: int, ceil: bool, count_pad: bool = True) -> torch.fx.Node:
        x = torch.randn(2, 3, side, side)
        g = torch.nn.functional.avg_pool2d(x, kernel, stride, ceil_mode=ceil)

        def f(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.aten.avg_pool2d_backward(g, x, [kernel, kernel], [stride, stride], [0, 0], ceil,
                                                      count_pad, None)
        gm = make_fx(f)(g, x)
        return next(n for n in gm.graph.nodes if n.target is torch.ops.aten.avg_pool2d_backward.default)

    assert _extern(node(2, 24, 24, ceil=True))  # EfficientNet's: one window larger than the map
    assert _extern(node(5, 2, 2, ceil=True))  # the last window holds one column of two
    assert not _extern(node(5, 2, 2, ceil=True, count_pad=False))  # inductor divides by the part inside
    assert not _extern(node(4, 2, 2, ceil=True))  # no window past the input: ceil_mode changes nothing
    assert not _extern(node(4, 2, 2, ceil=False))
    assert _extern(node(8, 7, 1, ceil=False))  # 49 windows per element: inductor's own fallback
