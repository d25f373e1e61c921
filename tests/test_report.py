"""module.report: a dataclass with a readable ``str``, the full record in ``asdict``, and the old
``report["key"]`` reads still working."""

from __future__ import annotations

import dataclasses
import json

import pytest

import models
import remat
from remat.report import Report, time_ratio


@pytest.fixture(scope="module")
def compiled():
    model, inputs = models.build_mlp()
    return remat.optimize(model, inputs, "60%")


def test_report_is_a_dataclass_with_the_numbers(compiled):
    rep = compiled.report
    assert isinstance(rep, Report) and isinstance(rep, remat.Report)
    assert rep.executor == "compiled" and rep.model == "DeepMLP" and rep.solver
    assert rep.measured_peak <= rep.budget * 1.01 and rep.method == "profiler"
    assert rep.budget == pytest.approx(0.6 * rep.vanilla_measured_peak)
    assert rep.predicted_peak <= rep.budget < rep.vanilla_predicted_peak
    assert rep.time_ratio == pytest.approx(time_ratio(rep.recompute_cost, rep.forward_cost)) and rep.time_ratio > 1
    assert rep.recompute_fraction == pytest.approx(rep.recompute_cost / rep.forward_cost)
    # where the memory goes: what is live at the planned peak, by module, adds up to it
    assert sum(rep.memory.values()) == pytest.approx(rep.predicted_peak)
    assert "gradients" in rep.memory and set(rep.memory) - {"gradients"}
    assert all(k in ("gradients", "(top level)") or k.startswith(("layers", "head")) for k in rep.memory)
    assert 0 <= rep.peak_step < rep.steps


def test_str_is_readable(compiled):
    text = str(compiled.report)
    lines = text.splitlines()
    assert lines[0].startswith("remat plan for DeepMLP: solver ")
    for word in ("budget", "vanilla peak", "planned peak", "measured (profiler)", "predicted", "time ratio",
                 "where the memory goes", "gradient buffers", "within budget"):
        assert word in text, word
    assert "KiB" in text and "{" not in text  # sizes with units, not a dict
    assert len(lines) < 25


def test_asdict_and_json_give_the_full_record(compiled):
    rep = compiled.report
    record = dataclasses.asdict(rep)
    assert record == rep.to_json()
    assert json.loads(json.dumps(record))["tried"] == json.loads(json.dumps(rep.tried))
    assert record["extra"]["chosen"] == rep["chosen"]  # the planner's other keys
    assert {"budget", "measured_peak", "vanilla_measured_peak", "predicted_peak", "time_ratio", "memory",
            "solver", "tried"} <= set(record)


def test_old_dict_reads_still_work(compiled):
    rep = compiled.report
    assert rep["measured_peak"] == rep.measured_peak and rep["budget"] == rep.budget
    assert rep.get("vanilla_measured_peak") == rep.vanilla_measured_peak
    assert rep.get("no such key", 7) == 7 and "no such key" not in rep and "tried" in rep
    assert {"recompute_cost", "kept", "saved_values", "dropped_outputs"} <= set(rep.keys())
    assert dict(rep.items())["solver"] == rep.solver
    with pytest.raises(KeyError):
        rep["no such key"]


def test_interpreted_executor_reports_the_same_way():
    model, inputs = models.build_mlp()
    module = remat.optimize(model, inputs, "70%", executor="interpret")
    rep = module.report
    assert isinstance(rep, Report) and rep.executor == "interpret"
    assert remat.explain(module).peak == pytest.approx(rep.predicted_peak)  # explain takes either executor
    assert rep["measured_peak"] <= rep["budget"] * 1.01 and rep.extra["planning_budget"] is not None
    assert sum(rep.memory.values()) == pytest.approx(rep.predicted_peak)
    assert "remat plan for DeepMLP" in str(rep) and "interpret executor" in str(rep)


def test_without_verification_there_is_no_measurement():
    model, inputs = models.build_mlp()
    rep = remat.optimize(model, inputs, "60%", verify=False).report
    assert rep.measured_peak is None and rep.vanilla_measured_peak is None
    text = str(rep)
    assert "measured" not in text and "predicted" in text


def test_time_ratio_counts_the_backward_as_twice_the_forward():
    assert time_ratio(0.0, 10.0) == 1.0
    assert time_ratio(30.0, 10.0) == pytest.approx(2.0)
    assert time_ratio(5.0, 0.0) == 1.0


def test_the_vanilla_row_says_when_remats_plain_code_needs_less_than_eager():
    from remat.report import Report

    same = Report("Net", "compiled", "none", "time", budget=100.0, vanilla_predicted_peak=100.0,
                  predicted_peak=100.0, vanilla_measured_peak=100.0, measured_peak=100.0, method="profiler")
    less = Report("Net", "compiled", "none", "time", budget=100.0, vanilla_predicted_peak=80.0,
                  predicted_peak=80.0, vanilla_measured_peak=100.0, measured_peak=80.0, method="profiler")
    assert "measured (profiler), 100 B predicted" in str(same) and "nothing recomputed" not in str(same)
    assert "100 B measured (profiler); remat's code with nothing recomputed: 80 B predicted" in str(less)
