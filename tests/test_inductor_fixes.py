"""inductor_fixes: AOTAutograd's donated saved tensors, without those sharing a storage with another
saved tensor (inductor wrote over one while the other was still to be read: HF Mamba's gradients
41% off under remat's plan)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch._functorch._aot_autograd import graph_compile
from torch.fx.experimental.proxy_tensor import make_fx

from remat.compiled.inductor_fixes import unaliased_donations


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
