"""The fused model of what inductor's code pays to recompute (``remat.compiled.fusedcost``):
exact values on a GELU MLP's decomposed joint graph, as inductor's partitioner receives it."""

from __future__ import annotations

from collections import Counter

import torch
import torch.fx as fx
from torch import nn

from remat.compiled import fusedcost, jointgraph

FIGURES = {"flops": 1e9, "bandwidth": 1e9}  # one FLOP or one byte: a nanosecond
ELEMENTS = 32 * 64  # the hidden activations of the MLP below


def _inductor_joint() -> jointgraph.JointGraph:
    """Linear -> GELU -> Linear, traced with inductor's decompositions (GELU as mul, erf, add)."""
    from functorch.compile import default_partition
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._inductor.decomposition import select_decomp_table

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 4))
    got: dict[str, tuple[fx.GraphModule, int]] = {}

    def partition(gm, joint_inputs, *, num_fwd_outputs, **kw):
        got["joint"] = (gm, num_fwd_outputs)
        return default_partition(gm, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kw)

    class Tuple(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x):
            return (self.model(x),)

    aot_module_simplified(Tuple(), (torch.randn(32, 16),), fw_compiler=boxed_nop, partition_fn=partition,
                          decompositions=select_decomp_table())
    gm, n = got["joint"]
    return jointgraph.build(gm, n, cost="roofline", statistics=False)


def _by_op(jg: jointgraph.JointGraph) -> dict[str, str]:
    return {jg.graph[v].op: v for v in jg.node_of}


def test_a_value_an_extern_kernel_reads_is_computed_and_stored():
    jg = _inductor_joint()
    last = _by_op(jg)["mul.Tensor"]  # GELU's output, (x * 0.5) * (1 + erf(...)), read by the weight gradient's mm
    assert last in jg.fusible
    seconds = fusedcost.recompute_seconds(jg, Counter({last: 1}), figures=FIGURES)
    assert seconds == ELEMENTS * 1e-9 + ELEMENTS * 4 * 1e-9  # its arithmetic, then writing it (fp32)
    assert fusedcost.recompute_seconds(jg, Counter({last: 2}), figures=FIGURES) == 2 * seconds


def test_a_value_only_fused_kernels_read_costs_its_arithmetic():
    jg = _inductor_joint()
    erf, add = _by_op(jg)["erf.default"], _by_op(jg)["add.Tensor"]
    assert fusedcost.recompute_seconds(jg, Counter({erf: 1}), figures=FIGURES) == ELEMENTS * 1e-9
    assert fusedcost.recompute_seconds(jg, Counter({erf: 1, add: 1}), figures=FIGURES) == 2 * ELEMENTS * 1e-9


def test_an_extern_op_costs_what_the_plan_costs_it():
    jg = _inductor_joint()
    mm = _by_op(jg)["addmm.default"]
    assert mm not in jg.fusible
    assert fusedcost.recompute_seconds(jg, Counter({mm: 1}), figures=FIGURES) == jg.graph[mm].cost
    assert fusedcost.recompute_seconds(jg, Counter(), figures=FIGURES) == 0.0


def test_recomputations_count_the_runs_after_the_first():
    steps = [("fwd", "a"), ("fwd", "b"), ("bwd", "b"), ("fwd", "a"), ("fwd", "a"), ("bwd", "a")]
    assert fusedcost.recomputations(steps) == Counter({"a": 2})


def test_the_priced_graph_costs_fusible_values_as_fused_code_and_leaves_the_rest():
    jg = _inductor_joint()
    ops = _by_op(jg)
    priced = fusedcost.priced(jg, jg.graph, figures=FIGURES)
    assert priced[ops["mul.Tensor"]].cost == ELEMENTS * 1e-9 + ELEMENTS * 4 * 1e-9  # stored for the mm
    assert priced[ops["erf.default"]].cost == ELEMENTS * 1e-9
    assert priced[ops["addmm.default"]].cost == jg.graph[ops["addmm.default"]].cost
    assert [priced[v].mem for v in priced.order] == [jg.graph[v].mem for v in jg.graph.order]
    assert jg.graph[ops["erf.default"]].cost > ELEMENTS * 1e-9  # the planning graph keeps its own prices
