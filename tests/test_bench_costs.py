"""bench/bench_costs.py (op costs in device time): a quick CPU smoke run of the whole harness on a
tiny model, and the matched-peak arithmetic on hand-made rows. No timing is asserted."""

from __future__ import annotations

import json

import pytest

import bench_scripts


@pytest.mark.slow
def test_quick_run_writes_every_cost(tmp_path):
    bench = bench_scripts.load("bench_costs")
    assert bench.main(["--quick", "--models", "mlp", "--dtype", "bf16", "--out", str(tmp_path / "out"),
                       "--cache", str(tmp_path / "cache")]) == 0
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert (result["dtype"], result["size"]) == ("bf16", "cpu")
    rows = result["models"][0]["rows"]
    assert {r["cost"] for r in rows} == {"flops", "roofline", "profile"}
    ok = [r for r in rows if "error" not in r]
    assert {r["cost"] for r in ok} == {"flops", "roofline", "profile"}
    for r in ok:
        assert 0 < r["peak_fraction"] < 1.2 and r["time_ratio"] > 0 and r["planning_seconds"] > 0
    # the profile's first plan times the ops, the next one reads them from the cache
    timed = [r["ops_timed"] for r in ok if r["cost"] == "profile"]
    assert timed[0] > 0 and all(t == 0 for t in timed[1:])
    assert list((tmp_path / "cache").glob("costs-*.json"))
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## mlp" in report and "## Summary" in report and "Fastest plans" in report
    assert (tmp_path / "out" / "costs_cpu.png").stat().st_size > 0
    assert "bench_costs.py --quick" in (tmp_path / "out" / "COMMANDS.md").read_text()


def test_matched_peak_compares_frontiers():
    bench = bench_scripts.load("bench_costs")
    rows = [{"cost": "flops", "peak_fraction": 0.5, "time_ratio": 1.3},
            {"cost": "flops", "peak_fraction": 0.8, "time_ratio": 1.1},
            {"cost": "profile", "peak_fraction": 0.49, "time_ratio": 1.2},
            {"cost": "profile", "peak_fraction": 0.9, "time_ratio": 1.15},
            {"cost": "profile", "error": "refused"}]
    got = bench.matched(rows, ["flops", "profile"])
    assert got["grid"] == [0.5, 0.8, 0.9]
    # within 0.5 and 0.8 profile's best plan is its 0.49 one (1.2), within 0.9 its 0.9 one (1.15)
    assert got["mean"]["flops"] == pytest.approx((1.3 + 1.1 + 1.1) / 3)
    assert got["mean"]["profile"] == pytest.approx((1.2 + 1.2 + 1.15) / 3)
    assert got["pairs"] == [{"cost": "profile", "flops_peak": 0.5, "flops_time": 1.3, "peak": 0.49, "time": 1.2}]
