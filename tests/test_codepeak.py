"""The generated code's own peak as inductor runs it (``codepeak.fused_values``): which values
live inside fused kernels, on a hand-sized graph."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from remat.compiled.codepeak import REALIZE_READS, fused_values


def _graph(f, *shapes):
    return make_fx(f, tracing_mode="fake")(*(torch.randn(s) for s in shapes)).graph


def test_pointwise_chains_fuse_and_buffers_stay_where_kernels_need_them():
    def f(x, w):
        a = x.sin()              # read only by cos: inside a kernel
        b = a.cos()              # read by a matmul (an extern kernel): a buffer
        c = torch.mm(b, w)       # made by one: a buffer
        d = c.exp()              # read by the sum and by div, cheap: each recomputes it inline
        e = d.sum(1, keepdim=True)
        return d / e             # an output: a buffer

    names = {n.name for n in fused_values(_graph(f, (4, 4), (4, 4)))}
    assert names == {"sin", "exp", "sum_1"}


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


def test_hoisting_runs_what_reads_only_primals_first():
    """A recomputed weight cast reads only parameters: inductor may run it at the top of the
    backward, so the fused walk counts it there."""
    from remat.compiled.codepeak import _walk

    def f(primals_1, tangents_1):
        a = tangents_1 * 2
        b = torch.mm(a, a)           # a is freed after this
        d = b.sum()
        c = primals_1 * 3            # reads only a primal: may run first
        return d, torch.mm(c, c)

    graph = _graph(f, (32, 32), (32, 32))
    out = next(n for n in graph.nodes if n.op == "output")
    keep = set(out.all_input_nodes)
    plain, _ = _walk(graph, {}, keep)
    hoisted, _ = _walk(graph, {}, keep, hoist=True)
    size = 32 * 32 * 4
    assert plain == 2 * size + 4      # c and the product of c, beside the sum
    assert hoisted == 3 * size        # c beside a and b
