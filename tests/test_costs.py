"""Op cost models of the compiled planner (remat.compiled.costs): the roofline's bound on
hand-sized ops, measured op times cached on disk (a second build times nothing), plans made with
measured costs train as eager does, and unknown cost names are refused."""

from __future__ import annotations

import copy
import json
import math
import time

import pytest
import torch
import torch.fx as fx
from torch import nn

import remat
from remat.compiled import costs, jointgraph
from remat.errors import InputError


def _node(target, *shapes: tuple[int, ...], out: tuple[int, ...], dtype=torch.float32) -> fx.Node:
    """One op of an fx graph whose inputs and output are meta tensors of the given shapes."""
    g = fx.Graph()
    args = []
    for i, shape in enumerate(shapes):
        p = g.placeholder(f"x{i}")
        p.meta["val"] = torch.empty(shape, dtype=dtype, device="meta")
        args.append(p)
    n = g.call_function(target, tuple(args))
    n.meta["val"] = torch.empty(out, dtype=dtype, device="meta")
    return n


@pytest.mark.parametrize("device", ["cpu", "H100"])
def test_roofline_takes_the_binding_bound(device):
    fig = costs.DEVICES[device]
    peak = fig.get("flops32", fig["flops"])
    k = 1024
    mm = _node(torch.ops.aten.mm.default, (k, k), (k, k), out=(k, k))
    add = _node(torch.ops.aten.add.Tensor, (k, k), (k, k), out=(k, k))
    moved = 3 * k * k * 4  # two inputs read, one output written, fp32
    assert costs.flops(mm) == 2 * k ** 3 and costs.bytes_moved(mm) == moved
    assert costs.flops(add) == k * k and costs.bytes_moved(add) == moved
    # a square matmul is compute-bound, an add memory-bound, on the CPU and on an H100 alike
    assert 2 * k ** 3 / peak > moved / fig["bandwidth"] and k * k / peak < moved / fig["bandwidth"]
    assert costs.roofline(mm, figures=fig) == pytest.approx(2 * k ** 3 / peak + fig["overhead"], rel=1e-12)
    assert costs.roofline(add, figures=fig) == pytest.approx(moved / fig["bandwidth"] + fig["overhead"], rel=1e-12)
    # the old import path still works
    assert jointgraph.roofline is costs.roofline and jointgraph.total_cost is costs.total_cost


def test_bf16_uses_the_tensor_core_peak():
    fig = costs.DEVICES["H100"]
    k = 4096
    mm = _node(torch.ops.aten.mm.default, (k, k), (k, k), out=(k, k), dtype=torch.bfloat16)
    assert costs.roofline(mm, figures=fig) == pytest.approx(2 * k ** 3 / fig["flops"] + fig["overhead"])


def test_random_draws_bound_a_dropout_mask_where_the_device_draws_slowly():
    """A dropout mask costs its draws at the device's draw rate when that binds (the CPU: about
    40 times a byte copied); a device without a draw figure (a GPU) costs it as memory traffic."""
    n = 1 << 20
    mask = _node(torch.ops.aten.bernoulli.p, (n,), out=(n,))
    mask.args = (*mask.args, 0.5)
    cpu, gpu = costs.DEVICES["cpu"], costs.DEVICES["H100"]
    assert costs.roofline(mask, figures=cpu) == pytest.approx(n / cpu["draws"] + cpu["overhead"], rel=1e-12)
    assert n / cpu["draws"] > costs.bytes_moved(mask) / cpu["bandwidth"]
    assert costs.roofline(mask, figures=gpu) == pytest.approx(
        costs.bytes_moved(mask) / gpu["bandwidth"] + gpu["overhead"], rel=1e-12)
    add = _node(torch.ops.aten.add.Tensor, (n,), (n,), out=(n,))  # not random: no draws
    assert costs.roofline(add, figures=cpu) == pytest.approx(
        costs.bytes_moved(add) / cpu["bandwidth"] + cpu["overhead"], rel=1e-12)


@pytest.mark.parametrize("target,kwargs,rate", [(torch.ops.aten.tanh.default, {}, "tanh"),
                                                (torch.ops.aten.gelu.default, {}, "erf"),
                                                (torch.ops.aten.gelu.default, {"approximate": "tanh"}, "tanh"),
                                                (torch.ops.aten.silu.default, {}, "sigmoid")])
def test_transcendental_ops_are_rated_by_the_cpus_rate_for_them(target, kwargs, rate):
    """On the CPU a tanh, erf or sigmoid per element is slower than moving its bytes: the
    roofline counts the elements at the device's rate for that function; on a GPU, the bytes."""
    n = 1 << 20
    op = _node(target, (n,), out=(n,))
    op.kwargs = kwargs
    cpu, gpu = costs.DEVICES["cpu"], costs.DEVICES["H100"]
    assert costs.rated(op) == (rate, n)
    assert costs.roofline(op, figures=cpu) == pytest.approx(n / cpu[rate] + cpu["overhead"], rel=1e-12)
    assert costs.roofline(op, figures=gpu) == pytest.approx(
        costs.bytes_moved(op) / gpu["bandwidth"] + gpu["overhead"], rel=1e-12)


def test_cpu_figures_are_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    fig = costs.device_figures("cpu")
    assert fig["measured"] == 1.0
    assert all(math.isfinite(fig[k]) and fig[k] > 0 for k in ("flops", "flops32", "bandwidth", "overhead", "draws", "tanh", "exp",
                                                                  "erf", "sigmoid"))
    files = list(tmp_path.glob("costs-cpu-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["figures"] == fig



def test_figures_cached_by_an_older_calibration_are_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    old = costs.Cache(torch.device("cpu"))
    old.set_figures({**costs.DEVICES["cpu"], "flops32": 1.0, "measured": 1.0, "version": costs.FIGURES_VERSION - 1})
    old.save()
    fig = costs.device_figures("cpu")
    assert fig["version"] == costs.FIGURES_VERSION and fig["flops32"] > 1.0
    assert json.loads(old.path.read_text())["figures"] == fig


def test_a_cpu_figure_is_its_fastest_run_over_rounds_so_a_slow_spell_cannot_lower_it(monkeypatch):
    """Rounds run in a slow spell of the machine (here the first two of four, and the last one slowed
    again) must not set the device's figures: a cached median of five had once halved a CPU's fp32
    matmul rate."""
    calls = []

    def timed(fn, repeats):  # seconds of each measure, by the round it is in
        calls.append(fn)
        return 1e-3 * (4.0 if len(calls) <= 2 * measures else 1.0 if len(calls) <= 3 * measures else 2.0)

    measures = 10 if costs._low_precision_matmul(torch.rand(2, 2), torch.rand(2, 2)) is not None else 9
    monkeypatch.setattr(costs, "_fastest_seconds", timed)
    monkeypatch.setattr(costs, "CALIBRATION_SECONDS", 0.0)
    monkeypatch.setattr(costs, "CALIBRATION_ROUNDS", 4)
    fig = costs._measure_cpu()
    assert len(calls) == 4 * measures
    assert fig["flops32"] == 2 * 512 ** 3 / 1e-3 and fig["overhead"] == 1e-3
    assert fig["bandwidth"] == 2 * 4 * 2 ** 22 / 1e-3 and fig["tanh"] == fig["draws"] == 2 ** 18 / 1e-3


def test_an_ops_time_is_its_fastest_run_in_a_window_so_a_slow_spell_cannot_set_it(monkeypatch):
    """An op's first three timed runs fall in a slow spell (4 ms each), the rest run at once: a median
    of five would be 4 ms; its cost is its fastest run over the window, and the window bounds the runs."""
    runs = []

    def op():
        runs.append(1)
        if 2 <= len(runs) <= 4:  # (the first run is the warm-up)
            time.sleep(4e-3)

    monkeypatch.setattr(costs, "TIME_WINDOW", 0.05)
    monkeypatch.setattr(costs, "MAX_REPEATS", 30)
    seconds = costs._op_seconds(op, torch.device("cpu"))
    assert seconds < 1e-3
    assert len(runs) == 1 + 30  # the quick runs fill the window up to the most it takes
    runs.clear()
    monkeypatch.setattr(costs, "TIME_WINDOW", 0.0)
    costs._op_seconds(op, torch.device("cpu"))
    assert len(runs) == 1 + costs.REPEATS  # no window: the least it takes


def test_op_times_cached_by_another_way_of_timing_are_timed_again(tmp_path, monkeypatch):
    """A cache written by an older timing (no "timing" mark: medians of five) keeps its figures but
    not its op seconds, and saving over it does not bring them back."""
    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    path = costs.Cache(torch.device("cpu")).path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"ops": {"old-op": 1.0}, "figures": {"flops": 5.0}}))
    cache = costs.Cache(torch.device("cpu"))
    assert cache.ops == {} and cache.figures() == {"flops": 5.0}
    cache.put("new-op", 2.0)
    cache.save()
    saved = json.loads(path.read_text())
    assert saved["ops"] == {"new-op": 2.0} and saved["timing"] == costs.TIMING
    assert costs.Cache(torch.device("cpu")).ops == {"new-op": 2.0}


def test_the_cpu_is_calibrated_without_the_callers_tracing_state():
    """Called inside AOTAutograd's tracing (grad mode off, a mode that sees every op), the calibration
    runs on a thread of its own: at the caller's thread count, with none of that state, and an error
    it raises reaches the caller."""
    from torch.overrides import TorchFunctionMode

    class Counting(TorchFunctionMode):
        seen = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counting.seen += 1
            return func(*args, **(kwargs or {}))

    def state():
        torch.add(torch.ones(1), 1)
        return torch.is_grad_enabled(), torch.get_num_threads()

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with torch.no_grad(), Counting():
            got = costs._on_a_thread_of_its_own(state)
    finally:
        torch.set_num_threads(before)
    assert got == (True, 1) and Counting.seen == 0
    with pytest.raises(ZeroDivisionError):
        costs._on_a_thread_of_its_own(lambda: 1 / 0)

def _mlp() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 64), nn.LayerNorm(64),
                          nn.GELU(), nn.Linear(64, 4))
    return model, torch.randn(32, 16)


def _joint(model: nn.Module, x: torch.Tensor) -> tuple[fx.GraphModule, int]:
    """The AOTAutograd joint graph of one training step of ``model`` (what the planner is given)."""
    from functorch.compile import default_partition
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._functorch.aot_autograd import aot_module_simplified

    got = {}

    def partition(gm, joint_inputs, *, num_fwd_outputs, **kw):
        got["joint"] = (gm, num_fwd_outputs)
        return default_partition(gm, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kw)

    class Tuple(nn.Module):  # AOTAutograd wants tuple outputs
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x):
            return (self.model(x),)

    aot_module_simplified(Tuple(), (x,), fw_compiler=boxed_nop, partition_fn=partition)
    return got["joint"]


def test_profile_costs_are_measured_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    gm, n = _joint(*_mlp())
    before = costs.timed
    jg = jointgraph.build(gm, n, cost="profile")
    first = costs.timed - before
    g = jg.graph
    assert first > 0 and all(math.isfinite(g[v].cost) and g[v].cost > 0 for v in g.order)
    assert first <= len(g)  # the two LayerNorms (GELUs) of one shape are timed once
    assert any("ops timed" in note for note in jg.cost_notes)
    files = list(tmp_path.glob("costs-*.json"))
    assert len(files) == 1 and len(json.loads(files[0].read_text())["ops"]) == first
    # a second build of the same model (another process would read the file) times nothing
    again = jointgraph.build(_joint(*_mlp())[0], n, cost="profile")
    assert costs.timed - before == first
    assert [again.graph[v].cost for v in again.graph.order] == [g[v].cost for v in g.order]


def test_random_ops_fall_back_to_the_roofline(tmp_path, monkeypatch):
    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    gm, n = _joint(nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 2)), torch.randn(4, 8))
    jg = jointgraph.build(gm, n, cost="profile")
    random = [v for v in jg.random]
    assert random and any("random" in note for note in jg.cost_notes)
    for v in random:
        assert jg.graph[v].cost == costs.roofline(jg.node_of[v])


def test_profile_plans_train_as_eager(tmp_path, monkeypatch):
    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    model, x = _mlp()
    planned = remat.optimize(copy.deepcopy(model), (x,), budget="75%", cost="profile", verify=False)
    assert planned.graph is not None and all(planned.graph[v].cost > 0 for v in planned.graph.order)
    model(x).sum().backward()
    planned(x).sum().backward()
    for p, q in zip(model.parameters(), planned.parameters()):
        assert torch.equal(p.grad, q.grad)


def test_unknown_cost_names_the_known_ones():
    with pytest.raises(InputError, match="'flops', 'roofline', 'profile'"):
        costs.check("seconds")
    gm, n = _joint(*_mlp())
    with pytest.raises(InputError, match="unknown cost 'seconds'"):
        jointgraph.build(gm, n, cost="seconds")
    model, x = _mlp()
    with pytest.raises(InputError, match="'profile'"):
        remat.optimize(model, (x,), budget="75%", cost="seconds", verify=False)


def test_auto_cost_is_the_cost_benchmarks_best_on_each_kind_of_device(monkeypatch):
    assert costs.DEFAULT_COST == "auto"
    assert costs.resolve("auto", "cuda:1") == "profile"
    assert costs.resolve("auto", torch.device("cpu")) == "roofline"
    assert costs.resolve("auto", None) == "roofline"  # no device known (a meta graph): the roofline's figures
    assert costs.resolve("flops", "cuda") == "flops"
    with pytest.raises(InputError, match="unknown cost 'seconds'"):
        costs.resolve("seconds", "cpu")
    with monkeypatch.context() as m:  # several ranks: the plan every rank makes alike
        m.setattr(costs, "_ranks", lambda: 2)
        assert costs.resolve("auto", "cuda") == "roofline" and costs.resolve("profile", "cuda") == "profile"
    gm, n = _joint(*_mlp())
    auto, roof = (jointgraph.build(copy.deepcopy(gm), n, cost=c) for c in ("auto", "roofline"))
    assert auto.cost == roof.cost == "roofline"
    assert {v: auto.graph[v].cost for v in auto.graph.order} == {v: roof.graph[v].cost for v in roof.graph.order}
    model, x = _mlp()
    report = remat.optimize(model, (x,), budget="80%", verify=False).report  # the default: cost="auto"
    assert report.cost == "roofline" and "roofline costs" in str(report)


def test_cli_and_backend_take_profile():
    from remat.cli import build_parser

    assert build_parser().parse_args(["run", "resnet18", "--cost", "profile"]).cost == "profile"
    assert build_parser().parse_args(["run", "resnet18"]).cost == "auto"
    assert remat.backend(cost="profile").planner.cost == "profile"
    with pytest.raises(InputError, match="'roofline'"):
        remat.backend(cost="seconds")


def test_attention_without_dropout_is_timed():
    q = torch.empty(2, 4, 16, 8, device="meta")
    g = fx.Graph()
    args = []
    for name in "qkv":
        p = g.placeholder(name)
        p.meta["val"] = q
        args.append(p)
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    plain = g.call_function(op, tuple(args), {"dropout_p": 0.0, "is_causal": True})
    dropped = g.call_function(op, (*args, 0.1))
    for n in (plain, dropped):
        n.meta["val"] = (q, torch.empty(2, 4, 16, device="meta"))
    assert costs.unrunnable(plain) is None and costs.unrunnable(dropped) == "random"


def test_pooling_is_rated_by_its_windows_on_the_cpu():
    """A max pooling's work is its output elements times its window: on the CPU at the pooling
    rate (a ResNet stem's 3x3 pooling takes 1.1 ms where its bytes move in 20 us)."""
    pool = _node(torch.ops.aten.max_pool2d_with_indices.default, (8, 16, 32, 32), out=(8, 16, 16, 16))
    pool.args = (*pool.args, [3, 3], [2, 2], [1, 1])
    window = 8 * 16 * 16 * 16 * 9
    assert costs.rated(pool) == ("pool", window)
    cpu = costs.DEVICES["cpu"]
    assert costs.roofline(pool, figures=cpu) == pytest.approx(window / cpu["pool"] + cpu["overhead"], rel=1e-12)


def test_a_pooling_window_larger_than_its_input_reads_only_the_input():
    """HF EfficientNet pools its 2x2 last map with a 1280x1280 kernel (ceil mode): the window is
    clipped to the padded input, 4 elements per output, not 1.6M (which costed the op 113 s)."""
    pool = _node(torch.ops.aten.avg_pool2d.default, (2, 1280, 2, 2), out=(2, 1280, 1, 1))
    pool.args = (*pool.args, [1280, 1280], [1280, 1280], [0, 0], True)
    assert costs.rated(pool) == ("pool", 2 * 1280 * 4)
    padded = _node(torch.ops.aten.max_pool2d_with_indices.default, (1, 1, 2, 3), out=(1, 1, 1, 1))
    padded.args = (*padded.args, [9], [9], [1])
    assert costs.rated(padded) == ("pool", 4 * 5)


def test_the_roofline_times_convolutions_batch_norms_and_slow_ops_where_it_can(tmp_path, monkeypatch):
    """On the CPU a small convolution takes 70-100 us whatever its FLOPs (the roofline said 7-30):
    under ``"roofline"`` convolutions and batch norms are timed on the device, once per shape, and
    so is any op the roofline prices at ``TIME_FROM`` or more; cheaper ops keep their roofline,
    and a graph on the meta device (nothing to time on) too."""
    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(costs, "time_op", lambda n, device: 1e-3)

    def conv(device):
        n = _node(torch.ops.aten.convolution.default, (8, 16, 16, 16), (16, 16, 3, 3), out=(8, 16, 16, 16))
        n.args = (*n.args, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        for a in (*n.all_input_nodes, n):
            a.meta["val"] = torch.empty_like(a.meta["val"], device=device)
        return n

    def add(rows, device="cpu"):
        n = _node(torch.ops.aten.add.Tensor, (rows, 16), (rows, 16), out=(rows, 16))
        for a in (*n.all_input_nodes, n):
            a.meta["val"] = torch.empty_like(a.meta["val"], device=device)
        return n

    on_cpu, on_meta = conv("cpu"), conv("meta")
    small, large, large_on_meta = add(8), add(2 ** 16), add(2 ** 16, "meta")
    assert costs.roofline(small) < costs.TIME_FROM <= costs.roofline(large)
    notes: list[str] = []
    got = costs.node_costs([on_cpu, on_meta, small, large, large_on_meta], "roofline", notes=notes)
    assert costs.timed_kind(on_cpu) and not costs.timed_kind(small)
    assert got[on_cpu] == got[large] == 1e-3
    assert got[on_meta] == costs.roofline(on_meta, "cpu") != 1e-3
    assert got[small] == costs.roofline(small)
    assert got[large_on_meta] == costs.roofline(large_on_meta, "cpu") != 1e-3
    assert any("or more timed on the device (2 ops" in note for note in notes)
    assert costs.node_costs([on_cpu], "flops")[on_cpu] == costs.flops(on_cpu)  # FLOP costs time nothing
