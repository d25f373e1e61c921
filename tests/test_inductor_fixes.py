"""inductor_fixes: AOTAutograd's donated saved tensors, without those sharing a storage with another
saved tensor (inductor wrote over one while the other was still to be read: HF Mamba's gradients
41% off under remat's plan); random ops replayed from a generator state, with their inputs laid out
as the op needs (CPU flash attention read a saved query in inductor's layout as garbage: HF MobileViT's
gradients non-finite under bf16)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch._functorch._aot_autograd import graph_compile
from torch.fx.experimental.proxy_tensor import make_fx

from remat.compiled.inductor_fixes import replay_strides, unaliased_donations


def _graphs():
    """A forward returning one user output and three saved tensors, two of them one storage (a value
    and a view of it), and a backward."""

    def forward(p):
        y = p * 2
        return p + 1, y, y.view(2, 2), p - 1

    fw = make_fx(forward, tracing_mode="fake")(torch.randn(4))
    bw = make_fx(lambda t: (t * 3,), tracing_mode="fake")(torch.randn(4))
    meta = SimpleNamespace(num_forward=1, tensors_saved_for_backwards_slice=slice(1, 4), num_symints_saved_for_bw=0)
    return fw, bw, meta


def test_saved_tensors_sharing_a_storage_are_not_donated():
    fw, bw, meta = _graphs()
    assert graph_compile.collect_bw_donated_buffer_idxs(fw, bw, meta) == [0, 1, 2]  # torch's: all three
    with unaliased_donations():
        assert graph_compile.collect_bw_donated_buffer_idxs(fw, bw, meta) == [2]
    assert graph_compile.collect_bw_donated_buffer_idxs(fw, bw, meta) == [0, 1, 2]  # restored after


def test_donated_indices_count_the_saved_symbolic_sizes_first():
    fw, bw, meta = _graphs()
    meta.num_symints_saved_for_bw = 2  # the backward's inputs: two sizes, then the saved tensors
    with unaliased_donations():
        assert graph_compile.collect_bw_donated_buffer_idxs(fw, bw, meta) == [4]


def test_attention_replayed_from_a_generator_state_reads_inputs_in_inductor_s_layout():
    """The backward's example inputs carry the strides inductor's forward gave the saved values
    (AOTAutograd restrides them): here a query with a last dimension of stride 4. Compiled, the replayed
    attention reads it as its own lowering would (dense last dimension), as eager reads a copy."""
    import torch._inductor.config as inductor_config
    from torch._guards import TracingContext, tracing
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.virtualized import V
    from torch._prims.rng_prims import run_with_rng_state
    from torch._subclasses.fake_tensor import FakeTensorMode

    attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default

    def replayed(state, q, k, v):
        return (run_with_rng_state(state, attention, q, k, v, 0.0)[0] * 2,)

    gen = torch.Generator().manual_seed(0)
    traced = [torch.randn(2, 8, 2, 16, generator=gen).transpose(1, 2) for _ in range(3)]  # as eager saves them
    state = torch.get_rng_state()
    gm = make_fx(replayed)(state, *traced)
    qkv = [torch.randn(2, 8, 16, 2, generator=gen).permute(0, 3, 1, 2) for _ in range(3)]  # inductor's layout
    assert qkv[0].stride()[-1] != 1
    mode = FakeTensorMode()
    with V.set_fake_mode(mode), tracing(TracingContext(mode)), replay_strides(), \
            inductor_config.patch(fx_graph_cache=False):
        compiled = compile_fx_inner(gm, [mode.from_tensor(t) for t in (state, *qkv)])
    got = compiled([state, *qkv])[0]
    expected = attention(*(t.contiguous() for t in qkv), 0.0)[0] * 2
    assert torch.equal(got, expected)
