"""bench/bench_compiled.py (held-out models, issue 12): a quick CPU smoke run of the whole harness,
the targets' arithmetic on hand-made rows, and the peers' helpers. No timing is asserted."""

from __future__ import annotations

import json

import pytest
import torch

import bench_scripts
from remat.bench import heldout

METHODS = ["vanilla", "torch.compile b=1", "remat inductor 50%", "remat inductor @torch.compile b=1",
           "remat inductor 100%", "per-block checkpoint", "sac-matmul", "remat eager 50%", "remat eager 100%",
           "remat eager @per-block checkpoint", "remat eager @sac-matmul"]


@pytest.mark.slow
def test_quick_run_writes_every_method(tmp_path):
    bench = bench_scripts.load("bench_compiled")
    # one compile peer, and no new method built after 35 s (the ones left become "skipped" rows),
    # so that the smoke run stays near a minute on a loaded 2-core machine
    assert bench.main(["--quick", "--device", "cpu", "--models", "gpt2", "--dtypes", "fp32",
                       "--compile-budgets", "1.0", "--time-limit", "35", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["torch"] == torch.__version__ and result["device"] == "cpu"
    rows = {r["method"]: r for r in result["rows"] if r["model"] == "gpt2" and r["dtype"] == "fp32"}
    for name in METHODS:
        assert name in rows, f"no row for {name}"
    for name, r in rows.items():
        assert "error" in r or ("peak" in r and "time_ratio" in r), (name, r)
    ok = [r for r in rows.values() if "error" not in r]
    assert {"vanilla", "torch.compile b=1"} <= {r["method"] for r in ok}
    assert rows["vanilla"]["peak_fraction"] == 1.0 and rows["vanilla"]["grad_diff"] == 0.0
    for r in ok:
        assert r["peak"] > 0 and r["time_ratio"] > 0 and r["grad_diff"] >= 0
    # checkpointing and remat recompute in the eager step: same gradients as vanilla, dropout included
    for name in ("per-block checkpoint", "sac-matmul", "remat eager 100%"):
        if "error" not in rows[name]:
            assert rows[name]["grad_diff"] < 1e-5, name
    if "error" not in rows["remat eager 100%"]:  # also timed against vanilla alone
        assert rows["remat eager 100%"]["time_ratio_alone"] > 0
    assert isinstance(result["targets"]["gpt2/fp32"], list)
    report = (tmp_path / "report.md").read_text()
    assert "## gpt2/fp32" in report and "| remat eager 50% |" in report
    assert (tmp_path / "frontier_gpt2_fp32.png").stat().st_size > 0


def _row(method, family, peak, ratio, **kw):
    return {"model": "m", "dtype": "fp32", "method": method, "family": family, "peak": peak, "time_ratio": ratio, **kw}


def test_targets_are_computed_from_the_rows():
    bench = bench_scripts.load("bench_compiled")
    rows = [_row("vanilla", "vanilla", 100, 1.0),
            _row("per-block checkpoint", "per-block", 40, 1.4),
            _row("remat eager @per-block checkpoint", "remat-eager", 39, 1.2, budget_bytes=40),
            _row("remat eager 50%", "remat-eager", 52, 1.3, budget_bytes=50),
            _row("remat eager 100%", "remat-eager", 100, 1.01, budget_bytes=100),
            _row("torch.compile b=1", "compile", 90, 0.9),
            _row("remat inductor 50%", "remat-inductor", 0, 0, error="AttributeError: no backend")]
    got = {c["target"]: c for c in bench.targets(rows)}
    assert got["remat eager @per-block checkpoint: >= 5% faster than per-block checkpoint, peak no higher"]["pass"]
    assert got["remat eager 50%: time <= 1.15x vanilla"]["pass"] is False
    assert got["remat eager 50%: peak within budget +1%"]["pass"] is False  # 52 of 50
    assert got["remat eager 100% (no recomputation): time <= 1.02x vanilla"]["pass"] is True
    assert got["remat-eager: peak monotone in budget (1% slack)"]["pass"] is True
    assert got["remat inductor 50%: time <= 1.05x torch.compile b=1"]["pass"] is None  # not measured
    # the overhead target reads the timing against vanilla alone where there is one, and says both
    rows[4].update(time_ratio=1.06, time_ratio_alone=1.015, alone_rounds=20)
    got = {c["target"]: c for c in bench.targets(rows)}["remat eager 100% (no recomputation): time <= 1.02x vanilla"]
    assert got["pass"] is True and "x1.015 timed alone" in got["value"] and "x1.060 in the full round" in got["value"]
    rows[4].update(time_ratio=1.0, time_ratio_alone=1.03)
    assert {c["target"]: c for c in bench.targets(rows)}[
        "remat eager 100% (no recomputation): time <= 1.02x vanilla"]["pass"] is False
    # under inductor the baseline is torch.compile b=1: 0.927 / 0.9 in the full round, 1.01 alone with it
    rows.append(_row("remat inductor 100%", "remat-inductor", 88, 0.927))
    name = "remat inductor 100% (no recomputation): time <= 1.02x torch.compile b=1"
    got = {c["target"]: c for c in bench.targets(rows)}[name]
    assert got["pass"] is False and "x1.030" in got["value"]
    rows[-1].update(time_ratio_alone=1.01, alone_rounds=20)
    got = {c["target"]: c for c in bench.targets(rows)}[name]
    assert got["pass"] is True and "x1.010 timed alone with torch.compile b=1" in got["value"]


def test_a_peer_whose_gradients_are_not_eagers_is_named_so_beside_its_target():
    """Compared under eager's generator, torch.compile below budget 1.0 is off by O(1) on a model
    with dropout (pytorch/pytorch#190758); rounding (1e-6 at b=1) or a comparison under inductor's
    own generator says nothing of the kind."""
    bench = bench_scripts.load("bench_compiled")
    rows = [_row("vanilla", "vanilla", 100, 1.0, grad_diff=0.0),
            _row("torch.compile b=1", "compile", 90, 0.9, budget=1.0, grad_diff=1e-6, grads_rng="eager"),
            _row("torch.compile b=0.5", "compile", 50, 1.0, budget=0.5, grad_diff=1.3, grads_rng="eager"),
            _row("torch.compile b=0.2", "compile", 60, 1.1, budget=0.2, grad_diff=1.3),
            _row("remat inductor @torch.compile b=0.5", "remat-inductor", 49, 0.9, grad_diff=2e-6,
                 grads_rng="eager"),
            _row("remat inductor 50%", "remat-inductor", 50, 0.9, grad_diff=0.02, grads_rng="eager")]
    by = {r["method"]: r for r in rows}
    assert "pytorch/pytorch#190758" in bench.wrong_grads(by["torch.compile b=0.5"], by)
    assert bench.wrong_grads(by["torch.compile b=0.2"], by) is None  # inductor's own masks: nothing to say
    assert bench.wrong_grads(by["torch.compile b=1"], by) is None
    assert bench.wrong_grads(by["remat inductor @torch.compile b=0.5"], by) is None
    mine = bench.wrong_grads(by["remat inductor 50%"], by)
    assert mine.startswith("gradients not eager's (grad diff 0.02") and "190758" not in mine
    # in bf16 torch.compile b=1 is itself 1e-2 off: 0.85 is still wrong, remat's 1.2e-2 is not
    rows[1]["grad_diff"] = 1e-2
    rows[3].update(grad_diff=0.85, grads_rng="eager")
    rows[4]["grad_diff"] = 1.2e-2
    assert "190758" in bench.wrong_grads(by["torch.compile b=0.2"], by)
    assert bench.wrong_grads(by["remat inductor @torch.compile b=0.5"], by) is None
    got = {c["target"]: c["value"] for c in bench.targets(rows)}
    assert "the peer's gradients not eager's" in got[
        "remat inductor @torch.compile b=0.5: >= 5% faster than torch.compile b=0.5, peak no higher"]


def test_each_remat_step_is_judged_against_its_baseline_plus_the_predicted_recomputation():
    """Issue 12: a step within 5% of vanilla's (torch.compile b=1's for remat inductor) plus the
    plan's recompute cost in seconds; rows that did not run, or share another's plan, are not judged."""
    bench = bench_scripts.load("bench_compiled")
    rows = [_row("vanilla", "vanilla", 100, 1.0, step_seconds=0.100),
            _row("remat eager 50%", "remat-eager", 50, 1.1, step_seconds=0.112, report_recompute_cost=0.010),
            _row("remat eager @sac-matmul", "remat-eager", 80, 1.0, step_seconds=0.100,
                 report_recompute_cost=0.010),
            _row("remat eager 100%", "remat-eager", 90, 0.96, step_seconds=0.096, report_recompute_cost=0.0,
                 report_executor="compiled"),
            _row("remat eager @per-block checkpoint", "remat-eager", 40, 1.0, step_seconds=0.1,
                 report_recompute_cost=0.0, same_as="remat eager 50%"),
            _row("torch.compile b=1", "compile", 90, 0.8, step_seconds=0.080),
            _row("remat inductor 50%", "remat-inductor", 50, 0.9, step_seconds=0.095, report_recompute_cost=0.005),
            _row("remat inductor @torch.compile b=1", "remat-inductor", 0, 0, error="failed")]
    got = {c["target"]: c for c in bench.targets(rows)}
    mine = {k.split(":")[0]: v for k, v in got.items() if "predicted recomputation" in k}
    assert set(mine) == {"remat eager 50%", "remat eager @sac-matmul", "remat eager 100%", "remat inductor 50%"}
    assert mine["remat eager 50%"]["pass"] is True and "x1.018" in mine["remat eager 50%"]["value"]  # 112 of 110
    # also read from remat's own no-recompute step where that ran the generated code: 112 of 106
    assert "from remat's no-recompute step (96.00): x1.057" in mine["remat eager 50%"]["value"]
    assert mine["remat eager 100%"]["pass"] is True and "no-recompute step" not in mine["remat eager 100%"]["value"]
    # faster than predicted is as far off as slower: 100 of 110
    assert mine["remat eager @sac-matmul"]["pass"] is False and "x0.909" in mine["remat eager @sac-matmul"]["value"]
    assert mine["remat inductor 50%"]["pass"] is False and "x1.118" in mine["remat inductor 50%"]["value"]  # 95 of 85
    assert "no-recompute step" not in mine["remat inductor 50%"]["value"]
    # also read from remat inductor's own no-recompute step, as eager's: 95 of 76 + 5
    with_own = rows + [_row("remat inductor 100%", "remat-inductor", 90, 0.76, step_seconds=0.076,
                            report_recompute_cost=0.0)]
    got = {c["target"]: c for c in bench.targets(with_own)}
    assert "from remat's no-recompute step (76.00): x1.173" in got[
        "remat inductor 50%: step within 5% of torch.compile b=1's plus the predicted recomputation"]["value"]
    # the graphs of a graph break add their recompute costs
    assert bench._graph_reports([{"recompute_cost": 0.25}, {"recompute_cost": 0.5}])["report_recompute_cost"] == 0.75
    # inductor's code is judged by its fused prediction (``recompute_time``) where the report gives one: 95 of 95
    rows[6]["report_recompute_time"] = 0.015
    got = {c["target"]: c for c in bench.targets(rows)}
    fused = got["remat inductor 50%: step within 5% of torch.compile b=1's plus the predicted recomputation"]
    assert fused["pass"] is True and "x1.000" in fused["value"]
    both = bench._graph_reports([{"recompute_cost": 0.25, "recompute_time": 0.1},
                                 {"recompute_cost": 0.5, "recompute_time": 0.2}])
    assert both["report_recompute_time"] == pytest.approx(0.3)


def test_remat_is_compared_with_a_peer_round_by_round():
    """Against a peer, remat's step is the median of the two steps' ratio in each round; through
    both ratios to vanilla, vanilla's noise counts twice (here: its slow third round)."""
    bench = bench_scripts.load("bench_compiled")
    vanilla = [0.100, 0.100, 0.200]
    compiled, remat = [0.050, 0.060, 0.055], [0.052, 0.063, 0.058]
    rows = [_row("vanilla", "vanilla", 100, 1.0, round_seconds=vanilla),
            _row("torch.compile b=1", "compile", 90, sorted(c / v for c, v in zip(compiled, vanilla))[1],
                 round_seconds=compiled),
            _row("remat inductor 50%", "remat-inductor", 50, sorted(r / v for r, v in zip(remat, vanilla))[1],
                 round_seconds=remat)]
    got = {c["target"]: c for c in bench.targets(rows)}["remat inductor 50%: time <= 1.05x torch.compile b=1"]
    assert got["pass"] is True and got["value"].startswith("x1.050 (round by round; x1.040 through vanilla's)")
    assert bench.paired(rows[2], rows[1]) == pytest.approx(1.05)
    del rows[2]["round_seconds"]  # results written before the rounds were kept: the quotient
    assert bench.paired(rows[2], rows[1]) == pytest.approx(0.52 / 0.50)


def test_a_graph_break_step_recomputes_its_graphs_costs_over_their_forwards():
    bench = bench_scripts.load("bench_compiled")
    graphs = [{"recompute_cost": 1.0, "recompute_fraction": 0.1, "forward_cost": 10.0},
              {"recompute_cost": 0.5, "recompute_fraction": 0.5}]          # forward 1, from the fraction
    assert bench.step_recompute_fraction(graphs) == pytest.approx(1.5 / 11)
    assert bench.step_recompute_fraction([{"recompute_cost": 0.5, "recompute_fraction": 0.0}]) is None
    got = bench._graph_reports(graphs)
    assert got["report_recompute_fraction"] == pytest.approx(1.5 / 11)


def test_a_graph_break_steps_predicted_peak_counts_what_the_other_graphs_hold():
    """The loss graph after a break runs beside the first graph's leftovers (its tail), and a later
    graph beside what the earlier ones hold: the step's predicted peak is the most any graph needs
    so (GPT-2 bf16 at 14.69 MB: 10.46 + 4.20 MB after the first forward, measured 14.39 MB, where the
    first graph's own walk said 13.09 MB)."""
    bench = bench_scripts.load("bench_compiled")
    graphs = [{"predicted_peak": 13.09, "after_forward": 10.46, "held_before": 0.0, "tail": 4.20},
              {"predicted_peak": 0.01, "after_forward": 0.0, "held_before": 5.57, "tail": 0.0}]
    assert bench._graph_reports(graphs)["predicted_peak"] == pytest.approx(14.66)
    graphs[1]["predicted_peak"] = 10.0  # a later graph's own peak over what it leaves room for
    assert bench._graph_reports(graphs)["predicted_peak"] == pytest.approx(15.57)
    assert bench._graph_reports([{"predicted_peak": 3.0}])["predicted_peak"] == 3.0  # one graph: its own


def test_a_backends_row_takes_the_step_peak_it_plans_with():
    """A backend that knows its step's graph calls (``step_peak``) is reported by them: at "100%"
    the graphs are partitioned without a tail, and the first graph's own walk read 37.3 MB for a
    GPT-2 fp32 step the backend put, and measured, at 44.2 MB."""
    bench = bench_scripts.load("bench_compiled")

    class Backend:
        report = [{"predicted_peak": 37.3, "after_forward": 30.0, "held_before": 0.0, "tail": 0.0},
                  {"predicted_peak": 1.0, "after_forward": 0.0, "held_before": 0.0, "tail": 0.0}]
        step_peak = 44.2

    assert bench._report_fields(Backend())["predicted_peak"] == 44.2
    Backend.step_peak = None  # before its first backward
    assert bench._report_fields(Backend())["predicted_peak"] == 37.3


def test_compiled_backends_never_compare_equal():
    # two budgets over one model must not share Dynamo's cache entries through equal backends
    a, b = heldout.Distinct("aot_eager"), heldout.Distinct("aot_eager")
    assert a != b and a == a and a.backend is b.backend


def test_grad_difference_compares_a_rounding_sized_gradient_at_the_floor():
    big, tiny = torch.tensor([0.5, -1.0]), torch.tensor([1e-12, -2e-12])
    # relative to each parameter's own scale
    assert heldout.grad_difference([big * 1.01, tiny], [big, tiny]) == pytest.approx(0.01, rel=1e-5)
    # a gradient of rounding only (true value zero) is compared at 1e-6 of the largest, not at its own size
    got = heldout.grad_difference([big, tiny * -3], [big, tiny])
    assert got == pytest.approx(8e-12 / heldout.GRAD_FLOOR, rel=1e-5)
    assert heldout.grad_difference([big, None], [big, tiny]) == 1.0  # a gradient on one side only
    assert heldout.grad_difference([torch.zeros(2)], [torch.zeros(2)]) == 0.0


def test_grad_floor_follows_the_autocast_dtype():
    assert heldout.grad_floor(None) == heldout.GRAD_FLOOR
    assert heldout.grad_floor(torch.bfloat16) == 2.0 ** -10  # bf16's epsilon 2**-7, an eighth of it
    # HF ViT's key bias under bf16: rounding at 2.6e-6 of the largest gradient, 150% apart in two codes
    big, bias = torch.tensor([0.7]), torch.tensor([2.6e-6 * 0.7])
    assert heldout.grad_difference([big, bias * -0.5], [big, bias]) > 1.0
    got = heldout.grad_difference([big, bias * -0.5], [big, bias], heldout.grad_floor(torch.bfloat16))
    assert got == pytest.approx(1.5 * 2.6e-6 * 2 ** 10, rel=1e-4)


def test_draws_random_sees_dropout_in_training_only_and_puts_the_generator_back():
    from torch import nn

    net = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1))
    x = torch.randn(4, 8)
    torch.manual_seed(5)
    assert heldout.draws_random(lambda: net(x))
    after = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(3))  # the generator where it was before the forward
    assert not heldout.draws_random(lambda: net.eval()(x))
    still = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.0)).train()
    assert not heldout.draws_random(lambda: still(x))


def test_sac_policy_saves_matmuls_only():
    from torch.utils.checkpoint import CheckpointPolicy

    assert heldout.sac_policy(None, torch.ops.aten.mm.default) == CheckpointPolicy.MUST_SAVE
    assert heldout.sac_policy(None, torch.ops.aten.gelu.default) == CheckpointPolicy.PREFER_RECOMPUTE
    # a fused attention is saved unless it draws dropout (SAC would not draw its numbers again)
    q = torch.empty(1, 1, 4, 8)
    flash, efficient = (torch.ops.aten._scaled_dot_product_flash_attention.default,
                        torch.ops.aten._scaled_dot_product_efficient_attention.default)
    assert heldout.sac_policy(None, flash, q, q, q) == CheckpointPolicy.MUST_SAVE
    assert heldout.sac_policy(None, flash, q, q, q, 0.0, True) == CheckpointPolicy.MUST_SAVE
    assert heldout.sac_policy(None, flash, q, q, q, 0.1) == CheckpointPolicy.PREFER_RECOMPUTE
    assert heldout.sac_policy(None, efficient, q, q, q, None, True, 0.1) == CheckpointPolicy.PREFER_RECOMPUTE
    assert heldout.sac_policy(None, efficient, q, q, q, None, True, dropout_p=0.0) == CheckpointPolicy.MUST_SAVE


def test_wrap_blocks_wraps_outermost_blocks():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.lin(x))

    model = torch.nn.Sequential(Block(), torch.nn.Sequential(Block(), Block()), torch.nn.Linear(4, 1))
    assert heldout.wrap_blocks(model, (Block,)) == 3
    x = torch.randn(3, 4)
    model(x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def _gpu_probe(name: str, module: str):
    """A script of bench/gpu_probe loaded as a module (its environment read at load). What loading it
    sets is taken back: the inductor cache settings it gives itself, its entries on ``sys.path`` and the
    sibling scripts it imports (each reads DEVICE at load: the next probe loads its own)."""
    import importlib.util
    import os
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "gpu_probe" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(module, path)
    probe = importlib.util.module_from_spec(spec)
    env, paths, modules = dict(os.environ), list(sys.path), set(sys.modules)
    try:
        spec.loader.exec_module(probe)
    finally:
        os.environ.clear()
        os.environ.update(env)
        sys.path[:] = paths
        for m in [m for m in sys.modules if m not in modules and getattr(sys.modules[m], "__file__", None)
                  and str(path.parent) in str(sys.modules[m].__file__)]:
            del sys.modules[m]
    return probe


@pytest.mark.slow
def test_gpu_overhead_probe_smoke_on_the_cpu(tmp_path, monkeypatch):
    """bench/gpu_probe/overhead.py, meant for a lent GPU, runs end to end here (DEVICE=cpu: aten ops for
    kernels; SIZE=quick: the tests' sizes), so a GPU session does not spend its minutes on a broken script."""
    monkeypatch.setenv("DEVICE", "cpu")
    monkeypatch.setenv("STEPS", "2")
    monkeypatch.setenv("SIZE", "quick")
    monkeypatch.setenv("BUDGETS", "100%,50%")
    probe = _gpu_probe("overhead", "gpu_overhead_probe")
    probe.main([str(tmp_path), "gpt2"])
    got = json.loads((tmp_path / "overhead.json").read_text())
    rows = got["models"]["gpt2"]["rows"]
    assert set(rows) == {"vanilla", "remat 100%", "remat 50%"}
    for r in rows.values():
        assert r["step_ms"] > 0 and r["enqueue_ms"] > 0 and r["kernels"] > 0 and r["kernel_ms"] > 0
    # "100%" recomputes nothing; "50%" does, and says how long its recomputation was predicted to take
    assert rows["remat 100%"]["predicted_recompute_ms"] == 0 and rows["remat 50%"]["predicted_recompute_ms"] > 0
    assert "predicted_recompute_ms" not in rows["vanilla"]
    by_budget = got["models"]["gpt2"]["by_budget"]
    assert set(by_budget) == {"remat 100%", "remat 50%"}
    assert got["models"]["gpt2"]["top_kernel_differences"] == by_budget["remat 100%"]


@pytest.mark.extended  # three minutes: six inductor compiles; run before a GPU session (``make test-extended``)
def test_gpu_inductor_gap_probe_smoke_on_the_cpu(tmp_path, monkeypatch):
    """bench/gpu_probe/inductor_gap.py, the first call of a lent GPU's session, runs end to end here
    (DEVICE=cpu, SIZE=quick, ROUNDS=2): every row compiled, planned once per budget, timed and profiled."""
    monkeypatch.setenv("DEVICE", "cpu")
    monkeypatch.setenv("ROUNDS", "2")
    monkeypatch.setenv("SIZE", "quick")
    probe = _gpu_probe("inductor_gap", "gpu_inductor_gap_probe")
    probe.main([str(tmp_path), "gpt2"])
    rows = json.loads((tmp_path / "gap.json").read_text())["rows"]
    assert len(rows) == 6 and "torch.compile b=1" in rows
    for label, r in rows.items():
        assert r["step_ms"] > 0 and r["peak_bytes"] > 0 and r["kernels"] > 0, label
        assert label == "torch.compile b=1" or r["report"], label
    assert "# ===== remat 50%" in (tmp_path / "plan.txt").read_text()


def test_plan_as_gpu_counts_each_kernels_calls_and_buffers():
    """bench/gpu_probe/plan_as_gpu.py reads an inductor C++ module's kernels: calls, buffers read
    (const pointers) and written, the widest first."""
    probe = _gpu_probe("plan_as_gpu", "gpu_plan_as_gpu_probe")
    code = "\n".join([
        "cpp_fused_add_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''",
        "cpp_fused_mul_sum_1 = async_compile.cpp_pybinding(['const bfloat16*', 'const float*', 'float*', 'float*', "
        "'const int64_t'], r'''",  # the last: a dynamic size, not a buffer
        "def call(args):",
        "    cpp_fused_add_0(buf0, buf1)",
        "    cpp_fused_mul_sum_1(buf1, buf2, buf3, buf4, 8)",
        "    cpp_fused_add_0(buf4, buf5)"])
    assert probe.kernel_table(code) == [
        {"kernel": "cpp_fused_mul_sum_1", "calls": 1, "reads": 2, "writes": 2},
        {"kernel": "cpp_fused_add_0", "calls": 2, "reads": 1, "writes": 1}]


@pytest.mark.slow
def test_gpu_session_script_smoke_on_the_cpu(tmp_path):
    """bench/gpu_session.sh, the lent GPU's one call per mode, runs here on one tiny model (DEVICE=cpu,
    EXTRA=--quick) and leaves its per-model results in OUT/<mode>.tar.gz and its log beside."""
    import os
    import subprocess
    import sys
    import tarfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "python3"  # the script calls python3, as the GPU machine's image has it: this one's
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "DEVICE": "cpu", "MODELS": "gpt2",
           "DTYPES": "fp32", "EXTRA": "--quick --steps 2 --overhead-rounds 0", "LIMIT": "60"}
    out = tmp_path / "out"
    done = subprocess.run(["bash", "bench/gpu_session.sh", "eager", str(out)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    log = (out / "eager.log").read_text()
    assert log.startswith("torch ") and "[gpt2 fp32] remat eager 50%" in log
    with tarfile.open(out / "eager.tar.gz") as tar:
        names = set(tar.getnames())
        result = json.load(tar.extractfile("./gpt2/results.json"))
    assert {"./gpt2/report.md", "./gpt2/results.json"} <= names
    assert {"vanilla", "per-block checkpoint", "sac-matmul", "remat eager 50%"} <= {r["method"] for r in result["rows"]}


@pytest.mark.extended  # kernels are grouped in every inductor test of the suite, each peak checked against the walk
def test_kernel_groups_smoke():
    """``bench_kernel_groups.py``'s measurement on the quick ViT at 70%, both ways in this process
    (its inductor cache keys the two apart): grouped where the guard allows, the code loads fewer
    C++ modules than with one per kernel, and peaks where that code does, as predicted."""
    bench = bench_scripts.load("bench_kernel_groups")
    apart, grouped = (bench.one("vit", g, "quick", 0.7) for g in (False, True))
    assert grouped["modules"] < apart["modules"]
    assert abs(grouped["measured_peak"] - apart["measured_peak"]) <= 0.001 * apart["measured_peak"]
    assert grouped["measured_peak"] <= 1.01 * grouped["budget"]
    assert abs(grouped["measured_peak"] - grouped["predicted_peak"]) <= 0.01 * grouped["predicted_peak"]
    assert grouped["first_step_seconds"] > 0
