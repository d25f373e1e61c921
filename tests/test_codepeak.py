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
        d = c.exp()              # read by a reduction and by div (two loops): a buffer
        e = d.sum(1, keepdim=True)
        return d / e             # an output: a buffer

    names = {n.name for n in fused_values(_graph(f, (4, 4), (4, 4)))}
    assert names == {"sin", "sum_1"}


def test_a_value_read_by_many_ops_gets_a_buffer():
    def f(x, n):
        a = x.sin()
        return sum((a * k for k in range(n)), x)

    few = {n.name for n in fused_values(_graph(lambda x: f(x, REALIZE_READS), (8,)))}
    many = {n.name for n in fused_values(_graph(lambda x: f(x, REALIZE_READS + 1), (8,)))}
    assert "sin" in few and "sin" not in many


def test_views_pass_their_readers_to_their_base():
    def f(x, w):
        a = x.sin()
        return torch.mm(a.t(), w)  # the matmul reads a through a view: a needs a buffer

    assert "sin" not in {n.name for n in fused_values(_graph(f, (4, 4), (4, 4)))}
