"""The benchmark suite's building blocks on tiny inputs (remat.bench, ``remat bench``).

Exact values on hand-sized cases (allocation replays, round-robin order, ratios), agreement
with direct solver calls for the predicted tables, same gradients for the peers, and the whole
suite end to end on a tiny configuration with fake runtime pieces.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
import torch
from torch import nn

import remat
from remat import judge, solvers, zoo
from remat.bench import measured, peers, plots, report, tables
from remat.bench.measured import Size, Timing, Tools, table1_measured, tradeoff_measured
from remat.bench.tables import Method
from remat.bench.steps import interleave, profiler_peak, replay_peak, time_ratios, train_step
from remat.bench.suite import SUITES, Suite, run_suite
from remat.cli import build_parser
from remat.machine import provenance


def small_graph(name: str, batch: int | None = None, **options) -> remat.Graph:
    """The zoo's abstract graphs at toy sizes (tables call graph_fn(net, batch=...))."""
    if name in ("ffn", "resnet"):
        return zoo.graph(name, batch=2, **options, **({"width": 16} if name == "ffn" else {"image_size": 32}))
    return zoo.graph(name, batch=batch or 2, image_size=32)


# ---- steps: replay, profiler, round-robin timing -------------------------------------------------
def test_replay_peak_is_the_running_maximum_in_time_order():
    events = [(3, 30), (0, 100), (2, -100), (1, 50)]
    assert replay_peak(events) == 150
    assert replay_peak([]) == 0


def test_profiler_peak_of_known_allocations():
    def step():
        a = torch.empty(2**20, dtype=torch.uint8)
        b = torch.empty(2 * 2**20, dtype=torch.uint8)
        del a
        c = torch.empty(2**19, dtype=torch.uint8)
        del b, c

    assert profiler_peak(step) == 3 * 2**20


def test_interleave_is_round_robin_rotated_and_drops_warmup():
    """Each round runs every step once, starting one step later than the round before; the
    warm-up round's times are dropped, and each time is its own step's."""
    order = []
    ticks = iter(range(1000))
    lengths = {"a": 1, "b": 2, "c": 3}

    def step(name):
        def run():
            order.append(name)
            for _ in range(lengths[name] - 1):
                next(ticks)
        return run

    times = interleave({k: step(k) for k in lengths}, repeats=3, warmup=1, clock=lambda: next(ticks))
    assert order == list("abc" "bca" "cab" "abc")
    assert times == {"a": [1, 1, 1], "b": [2, 2, 2], "c": [3, 3, 3]}
    places = {k: sorted(r.index(k) for r in (order[i:i + 3] for i in range(0, 9, 3))) for k in lengths}
    assert all(p == [0, 1, 2] for p in places.values())  # every step at every place of a round once


def test_time_ratios_are_medians_of_per_round_ratios():
    times = {"vanilla": [1.0, 2.0, 4.0], "x": [2.0, 2.0, 2.0]}
    assert time_ratios(times, "vanilla") == {"vanilla": 1.0, "x": 1.0}


# ---- predicted tables ------------------------------------------------------------------------------
def test_table1_predicted_rows_agree_with_direct_solver_calls():
    rows = tables.table1_predicted(["vgg11", "resnet18"], small_graph, batch={"vgg11": 2, "resnet18": 2})
    assert {r["network"] for r in rows} == {"vgg11", "resnet18"}
    for net in ("vgg11", "resnet18"):
        mine = {r["method"]: r for r in rows if r["network"] == net}
        assert set(mine) == {m.label for m in tables.TABLE1_METHODS}
        g = small_graph(net)
        vanilla = remat.simulate(g, remat.solve(g, None, solver="none")).peak
        for r in mine.values():
            assert r["status"] == "ok" and r["batch"] == 2 and r["nodes"] == len(g)
            assert r["reduction"] == pytest.approx(1 - r["simulated_peak"] / vanilla)
            assert r["time_ratio"] == pytest.approx(1 + r["recompute_cost"] / (3 * g.cost(g.order)))
        assert mine["vanilla"]["reduction"] == 0 and mine["vanilla"]["recompute_cost"] == 0
        b = judge.own_min_budget(g, "dp-approx")  # seed 000 §5.1: the algorithm's own minimal budget
        direct = solvers.get("dp-approx").fn(g, b, mode="time")
        assert mine["approx-tc"]["budget"] == b
        assert mine["approx-tc"]["simulated_peak"] == remat.simulate(g, direct).peak
        # ExactDP searches a superset of ApproxDP's lower sets: its minimal budget is no larger.
        assert mine["exact-tc"]["budget"] <= mine["approx-tc"]["budget"]
        for label in ("approx-tc", "approx-mc", "exact-tc", "exact-mc"):
            assert mine[label]["eq2_peak"] <= mine[label]["budget"]


def test_failing_or_skipped_solvers_become_rows():
    rows = tables.table1_predicted(["vgg11"], small_graph, exact_networks=())
    by = {r["method"]: r for r in rows}
    assert by["exact-tc"]["status"] == "skipped" and by["approx-tc"]["status"] == "ok"
    g = remat.Graph.chain(4)
    row = tables.plan_row(g, tables.Method("x", "no-such-solver", minimal=False), 1.0)
    assert row["status"] == "failed" and "no-such-solver" in row["message"]


def test_seed004_depth_rows():
    rows = tables.seed004_depth({"ffn": (2, 4)}, small_graph)
    assert [(r["depth"], r["solver"]) for r in rows] == [(d, s) for d in (2, 4) for s in tables.SCHEDULE_SOLVERS]
    for r in rows:
        if r["solver"] == "none":  # NoRemat computes every node of the joint graph once
            assert r["length"] == r["joint_nodes"] and r["relative_length"] == 1
        else:
            assert r["length"] >= r["joint_nodes"]


def test_seed003_tables_and_tradeoff_predicted():
    t1, t2 = tables.seed003_tables(["vgg11"], small_graph)
    assert [r["method"] for r in t1] == ["regular", "chen", "reforward"]
    assert t2[0]["theoretical_cut"] == pytest.approx(1 - t1[2]["objective"] / t1[0]["vanilla_peak"])
    g = small_graph("resnet18")
    rows = tables.tradeoff_predicted(g, [0.5, 1.0], ["none", "dp-approx"])
    assert [(r["solver"], r["fraction"]) for r in rows] == [("none", 0.5), ("none", 1.0),
                                                            ("dp-approx", 0.5), ("dp-approx", 1.0)]
    full = [r for r in rows if r["fraction"] == 1.0]
    assert all(r["feasible"] for r in full)
    assert not rows[0]["feasible"]  # vanilla never fits half of its own peak


# ---- peers ------------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(width, width), nn.Linear(width, width)

    def forward(self, x):
        return x + self.b(torch.relu(self.a(x)).sin())


class Net(nn.Module):
    def __init__(self, width: int = 64, depth: int = 6) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def _grads(model, x):
    model.zero_grad(set_to_none=True)
    zoo.loss(model(x)).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_checkpoint_blocks_wraps_blocks_keeps_gradients_and_saves_memory():
    torch.manual_seed(0)
    model, x = Net(), torch.randn(256, 64)
    wrapped, names = peers.checkpoint_blocks(model)
    assert names == ["stem (2 segments)"] + [f"blocks.{i}" for i in range(6)]
    assert isinstance(model.blocks[0], Block)  # the caller's model is untouched
    for a, b in zip(_grads(model, x), _grads(wrapped, x)):
        torch.testing.assert_close(a, b)
    plain = profiler_peak(train_step(model, (x,), zoo.loss))
    ckpt = profiler_peak(train_step(wrapped, (x,), zoo.loss))
    assert ckpt < plain


def test_checkpoint_blocks_refuses_a_model_without_blocks():
    with pytest.raises(ValueError, match="no blocks"):
        peers.checkpoint_blocks(nn.Linear(3, 3))


def test_compiled_peer_compiles_and_keeps_gradients():
    torch.manual_seed(0)
    model, x = Net(width=16, depth=2), torch.randn(8, 16)
    compiled = peers.Compiled(copy.deepcopy(model), 0.3)
    for a, b in zip(_grads(model, x), _grads(compiled, x)):
        torch.testing.assert_close(a, b)
    _, info = measured._compiled(model, (x,), fake_tools(), 0.5)
    assert info["graphs_compiled"] >= 1  # 0 would mean it silently ran eager
    with pytest.raises(ValueError, match="activation_memory_budget"):
        peers.Compiled(model, 1.5)


# ---- measured tables with fake runtime pieces -----------------------------------------------------
def fake_tools() -> Tools:
    """optimize = per-block checkpointing, so a 'plan' really changes memory; capture = a chain."""
    def build(name, batch, image_size=None):
        torch.manual_seed(0)
        return Net(), (torch.randn(batch, 64),)

    def optimize(model, inputs, budget, solver, mode="time", verify=True):
        return peers.checkpoint_blocks(model)[0]

    return Tools(build=build, loss=zoo.loss, optimize=optimize, measure=None,
                 capture=lambda model, inputs: remat.Graph.chain(3),
                 min_budget=lambda g, solver, mode: 1.0, predict=lambda g, b, s, m: (5.0, 7.0))


def test_table1_measured_rows_are_consistent():
    rows = table1_measured(["net"], {"net": Size(128)}, fake_tools(), timing=Timing(repeats=2, warmup=0))
    by = {r["method"]: r for r in rows}
    assert set(by) == {"vanilla", "chen", "reforward", "approx-tc", "approx-mc"}
    v = by["vanilla"]
    assert v["time_ratio"] == 1.0 and v["reduction_profiler"] == 0.0
    for r in rows:
        assert r["status"] == "ok" and r["batch"] == 128
        assert r["reduction_profiler"] == pytest.approx(1 - r["profiler_peak"] / v["profiler_peak"])
        assert r["predicted_peak"] == 7.0
    # optimize is asked for max(the plan's own peak, the minimal budget) first
    assert by["approx-tc"]["budget"] == 5.0 and by["chen"]["budget"] == 5.0
    assert by["approx-tc"]["profiler_peak"] < v["profiler_peak"]


def test_a_method_with_a_node_cap_is_skipped_on_larger_graphs_and_run_on_smaller():
    capped = (measured.MEASURED_METHODS[0], Method("milp", "milp", max_nodes=3), Method("small", "milp", max_nodes=2))
    rows = table1_measured(["net"], {"net": Size(4)}, fake_tools(), methods=capped,
                           timing=Timing(repeats=1, warmup=0))
    by = {r["method"]: r for r in rows}
    assert by["milp"]["status"] == "ok"  # the fake capture is a 3-node chain
    assert by["small"]["status"] == "skipped" and "3 nodes" in by["small"]["message"]


def test_table1_measured_on_cuda_fills_cuda_peaks_and_the_report_reads_them():
    def measure(model, inputs, method, loss_fn):
        assert method in ("cuda", "tracker")
        return {"peak": (50.0 if model is not base else 200.0) if method == "cuda" else 20.0}

    base = None
    tools = replace(fake_tools(), measure=measure)
    build = tools.build

    def remember(*args, **kw):
        nonlocal base
        base, inputs = build(*args, **kw)
        return base, inputs

    rows = table1_measured(["net"], {"net": Size(8)}, replace(tools, build=remember),
                           methods=measured.MEASURED_METHODS[:2], peaks=("cuda", "tracker"),
                           timing=Timing(repeats=1, warmup=0))
    by = {r["method"]: r for r in rows}
    assert by["vanilla"]["cuda_peak"] == 200.0 and by["chen"]["cuda_peak"] == 50.0
    assert by["chen"]["reduction_cuda"] == pytest.approx(0.75) and "profiler_peak" not in by["chen"]
    head = report.headline({"table1_measured": rows})
    assert head[0]["measured_reduction_cuda"] == pytest.approx(0.75) and head[0]["measured_best_cuda"] == "chen"
    assert "cuda MiB" in report._table1_measured_md(rows)


def test_measured_rows_say_when_pieces_are_missing():
    tools = replace(fake_tools(), optimize=None)
    rows = table1_measured(["net"], {"net": Size(4)}, tools)
    assert rows == [{"network": "net", "batch": 4, "image_size": None, "method": "all",
                     "status": "unavailable", "message": "remat.optimize not available"}]


def test_a_network_that_cannot_be_captured_is_a_row_and_the_others_still_run():
    def capture(model, inputs):
        if inputs[0].shape[0] == 1:
            raise ValueError("Expected more than 1 value per channel when training")
        return remat.Graph.chain(3)

    saved = []
    rows = table1_measured(["one", "net"], {"one": Size(1), "net": Size(8)}, replace(fake_tools(), capture=capture),
                           methods=measured.MEASURED_METHODS[:2], timing=Timing(repeats=1, warmup=0),
                           checkpoint=lambda rows: saved.append(len(rows)))
    assert rows[0]["network"] == "one" and rows[0]["status"] == "failed" and "per channel" in rows[0]["message"]
    assert [r["method"] for r in rows[1:]] == ["vanilla", "chen"] and all(r["status"] == "ok" for r in rows[1:])
    assert saved == [1, 3]  # the rows so far, after each network


def test_tradeoff_measured_with_peers():
    rows = tradeoff_measured("net", Size(64), fake_tools(), ["dp-approx"], [0.5], compile_budgets=(),
                             timing=Timing(repeats=2, warmup=0))
    by = {r["method"]: r for r in rows}
    matched = "auto at checkpoint per block's peak"
    assert set(by) == {"vanilla", "checkpoint per block", "dp-approx 50%", matched}
    assert by["vanilla"]["memory_ratio"] == 1.0 and by["vanilla"]["time_ratio"] == 1.0
    # the matched plan is planned at the peer's measured memory ratio
    assert by[matched]["matched"] == "checkpoint per block" and by[matched]["solver"] == "auto"
    assert by[matched]["fraction"] == pytest.approx(by["checkpoint per block"]["memory_ratio"])
    for r in rows:
        assert r["memory_ratio"] == pytest.approx(r["profiler_peak"] / by["vanilla"]["profiler_peak"])
    assert by["checkpoint per block"]["blocks"][0] == "stem (2 segments)"
    assert all("storage_peak" not in r for r in rows)  # no remat.measure, no storage tracking


@pytest.mark.parametrize("allocator", ["profiler", "cuda"])
def test_tradeoff_measured_reads_remat_measure_for_both_methods(allocator):
    """Allocator level ("profiler" on CPU, "cuda" on a GPU) for every step, then storage tracking."""
    calls = []

    def measure(model, inputs, method, loss_fn):
        calls.append(method)
        return {"peak": 100.0 if method == allocator else 40.0}

    tools = replace(fake_tools(), measure=measure)
    rows = tradeoff_measured("net", Size(8), tools, ["dp-approx"], [0.5], compile_budgets=(),
                             timing=Timing(repeats=1, warmup=0), allocator=allocator, match=None)
    assert calls == [allocator] * 3 + ["tracker"] * 3
    field = f"{allocator}_peak"
    assert [(r[field], r["storage_peak"], r["memory_ratio"]) for r in rows] == [(100.0, 40.0, 1.0)] * 3
    assert report.allocator(rows) == allocator
    verdicts = report.peers_at_equal_peak(rows)  # equal peak is judged on the allocator-level peaks
    assert [v["remat_method"] for v in verdicts] == ["dp-approx 50%"]


# ---- plots, report, the whole suite ---------------------------------------------------------------
def tiny_suite() -> Suite:
    return Suite(name="tiny", table1_networks=("vgg11",), exact_networks=None,
                 measured_sizes=(("net", Size(32)),), measured_methods=measured.MEASURED_METHODS[:2],
                 measured_peaks=("profiler",),
                 seed003_networks=("vgg11",),
                 seed004_depths=(("ffn", (2, 3)),), seed004_transformer=(),
                 tradeoff_networks=("vgg11",), fractions=(0.5, 1.0), sweep_solvers=("none", "dp-approx"),
                 measured_tradeoff=(("net", Size(32)),), measured_solvers=("dp-approx",),
                 measured_fractions=(0.5,), compile_budgets=(), timing=Timing(repeats=1, warmup=0))


def test_run_suite_end_to_end_writes_json_plots_and_report(tmp_path):
    header = provenance(["remat", "bench", "--suite", "tiny"])
    results = run_suite(tiny_suite(), tmp_path, header, tools=fake_tools(), graph_fn=small_graph)
    names = {p.name for p in tmp_path.iterdir()}
    for f in ("table1_predicted", "table1_measured", "seed003_table1", "seed003_table2", "seed004_depth",
              "tradeoff_predicted", "tradeoff_measured", "results"):
        data = json.loads((tmp_path / f"{f}.json").read_text())
        assert data["command"] == "remat bench --suite tiny"
        assert data["machine"]["cpu_count"] >= 1 and data["machine"]["torch"] == torch.__version__
    for p in results["plots"].values():
        assert p.exists() and p.stat().st_size > 1000
    assert {"tradeoff_vgg11_predicted.png", "tradeoff_net_measured.png", "seed004_depth.png"} <= names
    text = (tmp_path / "report.md").read_text()
    assert "## Headline" in text and "PREDICTED" in text and "MEASURED" in text
    for p in results["plots"].values():
        assert f"]({p.name})" in text
    head = report.headline(results["sections"])
    best = min((r for r in results["sections"]["table1_predicted"] if r["solver"] != "none"),
               key=lambda r: r["simulated_peak"])
    assert head[0]["network"] == "vgg11" and head[0]["predicted_reduction"] == best["reduction"]
    net = {r["method"]: r for r in results["sections"]["table1_measured"]}
    low = min((r for r in net.values() if r["solver"] != "none"), key=lambda r: r["profiler_peak"])
    assert head[1]["network"] == "net" and head[1]["measured_best_profiler"] == low["method"]
    assert head[1]["measured_reduction_profiler"] == 1 - low["profiler_peak"] / net["vanilla"]["profiler_peak"]
    assert "At equal measured peak" in text and (tmp_path / "peers_equal_peak.json").exists()
    (tmp_path / "report.md").unlink()
    assert report.rewrite(tmp_path).read_text() == text  # the same report, from the JSON files alone


def test_rewrite_needs_a_run_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no section JSON"):
        report.rewrite(tmp_path)


def test_peers_at_equal_peak_takes_the_fastest_plan_that_fits():
    def row(method, kind, peak, time):
        return {"network": "n", "method": method, "kind": kind, "status": "ok", "profiler_peak": peak,
                "memory_ratio": peak / 100, "time_ratio": time}

    rows = [row("vanilla", "vanilla", 100, 1.0), row("ckpt", "peer", 60, 1.3), row("compile", "peer", 20, 1.5),
            row("a 50%", "remat", 50, 1.35), row("b 60%", "remat", 60.5, 1.2), row("c 70%", "remat", 70, 1.1)]
    got = {r["peer"]: r for r in report.peers_at_equal_peak(rows)}
    # 60.5 is within the 1% slack of 60: the fastest plan that fits is b, 1.2 / 1.3 - 1 = -8%
    assert got["ckpt"]["remat_method"] == "b 60%" and got["ckpt"]["verdict"] == "remat no slower (8% faster)"
    assert "remat_method" not in got["compile"] and "lowest: a 50%" in got["compile"]["verdict"]
    slower = report.peers_at_equal_peak([*rows[:2], row("a 50%", "remat", 50, 1.43)])
    assert slower[0]["verdict"] == "remat 10% slower"


def test_plots_write_nonempty_files_even_without_data(tmp_path):
    assert plots.reductions([], tmp_path / "a.png").stat().st_size > 0
    assert plots.tradeoff([], tmp_path / "b.png", measured=True).stat().st_size > 0


def test_cli_parses_bench_and_suites_restrict_to_networks():
    args = build_parser().parse_args(["bench", "--suite", "paper", "--out", "x", "--networks", "vgg19"])
    assert (args.suite, args.out, args.networks) == ("paper", "x", "vgg19")
    only = SUITES["quick"].only(("vgg19",))
    assert only.table1_networks == ("vgg19",) and only.tradeoff_networks == ()
    assert only.measured_sizes == () and SUITES["quick"].only(("resnet50",)).measured_sizes and only.seed004_transformer == ()


def test_sections_only_runs_just_those_sections():
    from remat.bench.suite import sections_only

    s = sections_only(SUITES["paper"], ("table1_measured",))
    assert s.measured_sizes == SUITES["paper"].measured_sizes
    assert s.table1_networks == s.seed003_networks == s.seed004_depths == s.measured_tradeoff == ()
    with pytest.raises(ValueError, match="unknown section"):
        sections_only(SUITES["quick"], ("table9",))


@pytest.mark.slow
def test_frontier_measured_quick_run(tmp_path):
    """bench/bench_frontier_measured.py --quick: per model, every solver asked has a measured plan
    (peak and time ratio), each within its budget (+1%) and at the peak predicted for the generated
    code; refusals are rows with remat's message; a two-panel PNG per model. No timing asserted."""
    import bench_scripts

    bench = bench_scripts.load("bench_frontier_measured")
    models = ["mistral"]
    assert bench.main(["--quick", "--models", ",".join(models), "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["command"].startswith("python bench/bench_frontier_measured.py --quick")
    assert result["machine"] and result["settings"]["solvers"] == ["selective", "chen-sqrt"]
    for model in models:
        rows = [r for r in result["rows"] if r["model"] == model]
        by = {r["method"]: r for r in rows}
        assert by["vanilla"]["peak_fraction"] == 1.0 and by["vanilla"]["time_ratio"] == 1.0
        for peer in ("per-block checkpoint", "sac-matmul"):
            assert by[peer]["peak"] > 0 and by[peer]["time_ratio"] > 0, by[peer]
        for solver in result["settings"]["solvers"]:
            mine = [r for r in rows if r.get("solver") == solver]
            assert {"70%", "floor"} <= {r["budget"] for r in mine}, mine
            for r in mine:
                assert "error" not in r, r
                assert "refused" in r or ("peak" in r and "time_ratio" in r), r
                if "refused" in r:
                    assert r["refused"].startswith(("InfeasibleError", "BudgetError")), r
            measured = [r for r in mine if "peak" in r and "time_ratio" in r]
            assert measured, f"{model}: no measured plan of {solver}"
            for r in measured:
                assert r["peak_fraction"] > 0 and r["time_ratio"] > 0
                assert 0 < r["predicted_peak_fraction"] and r["recompute_fraction"] >= 0
                # the runtime's promise, on the allocator-level peak; the generated code's own peak
                assert r["peak"] <= 1.01 * r["budget_bytes"], r
                assert abs(r["predicted_peak"] / r["peak"] - 1) <= 0.02, r
        assert (tmp_path / f"frontier_{model}_fp32.png").stat().st_size > 0
        assert result["models"][f"{model}/fp32"]["figure"] == f"frontier_{model}_fp32.png"
    report = (tmp_path / "report.md").read_text()
    assert "## mistral/fp32" in report and "| sac-matmul |" in report


def test_bench_dynamic_smoke():
    """bench_dynamic on the quick Llama with fx codegen under a byte budget: gradients equal to
    eager's at every length, the budget held at each, a lengthier batch planned in a bucket of its
    own; timed beside per-block checkpointing. (A percentage at every length, planned once:
    ``test_backend_eager_plans_a_dynamic_shape_graph_once_and_is_exact_at_every_length``.)"""
    import bench_scripts

    bench = bench_scripts.load("bench_dynamic")
    lengths = [16, 12, 24, 32]
    budget = bench.of_largest("llama", "quick", lengths, 0.5)
    got = bench.run("llama", "eager", lengths, budget, size="quick", steps=1)
    rows = got["rows"]
    assert [r["graphs"] for r in rows] == [1, 2, 3, 3] and all(r["grad_diff"] == 0 for r in rows)
    assert got["varies"] == "sequence length" and rows[1]["notes"] and "=12)" in " ".join(rows[1]["notes"])
    assert all(r["budget_fraction"] <= 1.01 for r in rows), [r["budget_fraction"] for r in rows]
    assert "=32, the top of the sizes' power-of-two bucket" in rows[2]["notes"][0]
    assert got["per_block"] and all(0 < r["per_block_fraction"] < 1 and r["time_ratio"]["eager"] == 1 for r in rows)


@pytest.mark.extended  # unused outputs get no gradient: test_compiled's
# test_backend_allocates_no_gradient_for_outputs_the_loss_does_not_use (eager in the suite, inductor here)
def test_bench_output_grads_smoke():
    """bench_output_grads on the quick Llama (default arguments, given labels): remat.backend at
    "100%" peaks below torch.compile at budget 1.0 (no zeros for the logits and key/value caches
    the loss does not use), each plan's prediction is its measured peak, and at per-block
    checkpointing's peak the backend's plan holds it. (fx codegen only: inductor's code is held to
    the same by ``test_backend_allocates_no_gradient_for_outputs_the_loss_does_not_use``.)"""
    import bench_scripts

    rows = bench_scripts.load("bench_output_grads").run("llama", size="quick", compilers=("eager",),
                                                        peers=(1.0,))["rows"]
    assert "torch.compile b=0.5" not in rows and "remat.backend inductor 100%" not in rows
    plain = rows["torch.compile b=1.0"]["peak"]
    for compiler in ("eager",):
        full, low = rows[f"remat.backend {compiler} 100%"], rows[f"remat.backend {compiler} at per-block's peak"]
        assert full["peak"] < plain and full["unused_gradients_note"]
        assert abs(full["predicted_peak"] / full["peak"] - 1) <= 0.02
        assert low["peak"] <= 1.01 * rows["per-block"]["peak"]


@pytest.mark.extended  # two minutes (inductor's compile of a ResNet); remat.backend on a vision model under
# inductor in the suite: test_compiled's test_backend_inductor_plans_a_vision_model_with_the_fused_walk...
def test_bench_cnn_planning_smoke(tmp_path):
    """bench_cnn_planning on a one-block-per-stage narrow HF ResNet at 64 px: the row's
    plan is predicted within its budget, its measured peak is the prediction (2%), its step is timed
    beside eager's (``--steps``), and the report names the dtype, the budget and the plan's notes."""
    import json

    import bench_scripts

    mod = bench_scripts.load("bench_cnn_planning")
    assert mod.main(["--depths", "1,1,1,1", "--widths", "32,64,128,256", "--batch", "2", "--side", "64",
                     "--dtypes", "fp32", "--budget", "90%", "--steps", "1", "--out", str(tmp_path)]) == 0
    row = json.loads((tmp_path / "results.json").read_text())["rows"][0]
    assert set(row["time_ratios"]) == {"eager", "remat"} and row["time_ratios"]["eager"] == 1.0
    assert row["predicted_peak"] <= row["budget_bytes"]
    assert abs(row["remat_peak"] / row["predicted_peak"] - 1) <= 0.02
    assert row["peak_fraction"] == row["remat_peak"] / row["eager_peak"] < 1
    report = (tmp_path / "report.md").read_text()
    assert "| fp32 | 90% |" in report and row["notes"][0] in report and "step time / eager's" in report


def test_bench_repeated_smoke():
    """bench_repeated on the 3-block MLP whose one block graph runs three times a step, fx codegen at 70%
    of the eager step: the calls are seen, the graph planned again, and the measured peak within the budget;
    torch.compile per block beside it."""
    import bench_scripts

    got = bench_scripts.load("bench_repeated").run("mlp-alike", ["eager"], [0.7], rounds=1)
    peer, mine = got["rows"]
    assert peer["method"] == "torch.compile per block" and 0 < peer["measured_peak"]
    (g,) = mine["graphs"]
    assert g["calls_per_step"] == 3 and "planned again" in g["replans"][-1]
    assert mine["predicted_step_peak"] <= mine["budget"]
    # the eager input projection's output (block 0's input, 256 x 64 fp32) is held outside the graphs
    assert mine["measured_peak"] <= mine["budget"] + 256 * 64 * 4
