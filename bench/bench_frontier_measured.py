"""Predicted and measured frontier of every solver on the held-out CPU models, side by side.

For each model (``remat.bench.heldout``: transformers GPT-2, Llama, ViT and ResNet at their "cpu" size, and
``MistralForCausalLM`` 6 x 128, batch 4, sequence 128 as ``bench/bench_frontier.py`` builds it),
each dtype (fp32; bf16 autocast with ``--dtypes fp32,bf16``) and each solver (``--solvers``),
``remat.optimize(model, inputs, budget, solver=name)`` is built at 90/70/50/30% of the vanilla
peak (``--budgets``) and at the solver's floor, ``remat.min_budget(module.graph, solver)`` in
bytes (the planning graph's floor: the least executed peak the solver's plans reach). Where
optimize refuses that floor (the generated code runs ops the planning graph does not model, so
the floor plan's own code peaks above it), the least budget the refusal names (``needed``: what its
reader asks for next; else the floor plan's code peak) is tried as well, the row "floor (code)".
(Until the bf16 run of 8662828 the floor plan's code peak was tried even where the refusal named
less: under bf16 on Llama, auto's refusal names 0.374 of the vanilla peak, reached by the code-judged
search, where the solvers' floor plan's code needs 0.548.) A budget remat refuses
(``BudgetError``/``InfeasibleError``, or a solver refusing the graph) is a "refused" row with the
message; plans of one solver at different budgets with the same predicted peak and recompute
cost are measured once (the later rows say ``same_as``).

Per plan, predicted (``module.report``): peak = the generated code's own peak
(``report.predicted_peak``, ``remat.compiled.codepeak``) over the plain step's simulated peak
(``report.vanilla_predicted_peak``); recompute = ``report.recompute_fraction`` (recomputed work
over one forward's, in the cost model planned with: ``--cost``, default remat.optimize's).
Measured, in one process and harness with vanilla and the peers
(per-block checkpointing and per-block SAC saving matmuls, ``heldout.per_block``/``sac_matmul``):

- peak: ``remat.measure(..., method="profiler")`` (``steps.measured_peak``): the CPU allocator's
  peak replayed from ``torch.profiler`` allocations and frees, intra-op temporaries included,
  the step's parameter gradients left out; over vanilla's. Also the op-level peak
  (``method="tracker"``, live storages between ops: the scale remat plans and verifies on).
- time: every method's ``steps.train_step`` (gradients allocated by a warm-up step and zeroed in
  place) timed round-robin (``steps.interleave``), ratio = median over rounds of the method's
  step over vanilla's in the same round (``steps.time_ratios``).

    PYTHONPATH=src .venv/bin/python bench/bench_frontier_measured.py            # the full run
    PYTHONPATH=src .venv/bin/python bench/bench_frontier_measured.py --quick --out /tmp/fm

Writes OUT/results.json (after every row, so a stopped run keeps what finished), OUT/report.md
and OUT/frontier_<model>_<dtype>.png (left: predicted frontier, right: measured).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "src", ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.bench.heldout import Task  # noqa: E402
from remat.bench.steps import interleave, measured_peak, time_ratios, train_step  # noqa: E402
from remat.errors import RematError  # noqa: E402
from remat.machine import provenance  # noqa: E402
from remat.measure import measure  # noqa: E402

SOLVERS = ("auto", "selective", "blocks", "blocks-selective", "chen-sqrt", "chen-greedy", "dp-approx",
           "chen-recursive", "twremat", "greedy")
QUICK_SOLVERS = ("selective", "chen-sqrt")
BUDGETS = (0.9, 0.7, 0.5, 0.3)
QUICK_BUDGETS = (0.7,)
MODELS = ("gpt2", "llama", "vit", "resnet", "mistral")
DTYPES = {"fp32": None, "bf16": torch.bfloat16}
PEERS = {"per-block checkpoint": heldout.per_block, "sac-matmul": heldout.sac_matmul}
MiB = 2 ** 20
RESULTS = ROOT / "bench" / "results" / "frontier_measured"


def log(msg: str) -> None:
    print(msg, flush=True)


# ---- models ----------------------------------------------------------------------------------


def build(name: str, size: str, seed: int = 0) -> heldout.HeldOut:
    """A held-out model on the CPU; ``mistral`` as bench/bench_frontier.py builds it."""
    if name != "mistral":
        return heldout.build(name, "cpu", size, seed)
    from bench_frontier import build_mistral

    kw = dict(layers=6, hidden=128, intermediate=256, batch=4, seq=128) if size == "cpu" else \
        dict(layers=2, hidden=64, intermediate=128, batch=2, seq=32)
    heldout._quiet_transformers()
    model, inputs = build_mistral(**kw)
    ids = inputs["input_ids"]
    cfg = {k: v for k, v in model.config.to_dict().items() if isinstance(v, (int, float, str, bool))}
    blocks = tuple({type(m) for m in model.modules() if heldout.is_hf_layer(m)})
    source = ("transformers MistralForCausalLM(MistralConfig(vocab_size=1000, hidden_size={hidden}, "
              "intermediate_size={intermediate}, num_hidden_layers={layers}, num_attention_heads=4, "
              "num_key_value_heads=2, sliding_window=None)) (bench/bench_frontier.py build_mistral)").format(**kw)
    return heldout.HeldOut("mistral", source, model.train(), {"input_ids": ids, "labels": ids, "use_cache": False},
                           "lm", None, {**cfg, "batch": kw["batch"], "seq": kw["seq"]}, blocks)


class Bound(nn.Module):
    """``task(**inputs)`` as a call without arguments, for ``steps.train_step``."""

    def __init__(self, task: Task, inputs: dict[str, Any]) -> None:
        super().__init__()
        self.task = task
        self.inputs = inputs

    def forward(self) -> torch.Tensor:
        return self.task(**self.inputs)


def _identity(loss: torch.Tensor) -> torch.Tensor:
    return loss


def floor_code_peak(module: Any, solver: str) -> float | None:
    """The generated code's own peak for ``solver``'s floor plan on ``module``'s joint graph (the
    least budget ``remat.optimize`` can honour with that plan), None where it cannot be had."""
    from remat.compiled.codepeak import code_peak
    from remat.compiled.split import split
    from remat.optimize import smallest_choice
    from remat.runtime import executed_schedule

    jg = module.step.planned.joint
    choice = smallest_choice(jg.graph, solver)
    if choice is None:
        return None
    sp = split(jg, executed_schedule(jg.graph, choice.plan))
    return float(code_peak(sp.forward, sp.backward, jg.num_fwd_outputs).peak)


# ---- one (model, dtype) ----------------------------------------------------------------------


class Run:
    """Vanilla, the peers and every solver's plans on one (model, dtype): built, measured, timed."""

    def __init__(self, held: heldout.HeldOut, dtype_name: str, args: argparse.Namespace,
                 save: Callable[[list[dict[str, Any]]], None]) -> None:
        self.held, self.dtype_name, self.args, self._save = held, dtype_name, args, save
        self.dtype = DTYPES[dtype_name]
        self.rows: list[dict[str, Any]] = []
        self.tasks: dict[str, Task] = {}       # method -> the timed unit, in the order built
        self.graph_module: Any = None          # a planned module: its joint graph gives the floors
        self.graph_error = "not built"
        self.info: dict[str, Any] = {}         # the model's entry in results.json["models"]
        self.vanilla: dict[str, Any] | None = None

    def label(self) -> str:
        return f"[{self.held.name} {self.dtype_name}]"

    def save(self) -> None:
        self._save(self.rows)

    def task(self, net: nn.Module) -> Task:
        return Task(net, self.held.kind, self.held.labels, self.dtype, "cpu")

    def new_row(self, method: str, kind: str, **extra: Any) -> dict[str, Any]:
        row = {"model": self.held.name, "dtype": self.dtype_name, "method": method, "kind": kind, **extra}
        self.rows.append(row)
        return row

    def peaks(self, task: Task, row: dict[str, Any]) -> None:
        """Allocator-level (profiler) and op-level (tracker) peaks of one step, and their fractions."""
        row["peak"] = measured_peak(measure, task, self.held.inputs, _identity, "profiler")
        row["tracker_peak"] = float(measure(task, self.held.inputs, method="tracker", loss_fn=_identity).peak)
        if self.vanilla is not None:
            row["peak_fraction"] = row["peak"] / self.vanilla["peak"]
            row["tracker_fraction"] = row["tracker_peak"] / self.vanilla["tracker_peak"]

    # -- vanilla and the peers --

    def baseline(self) -> bool:
        started = time.perf_counter()
        row = self.new_row("vanilla", "vanilla")
        try:
            task = self.task(self.held.model)
            self.peaks(task, row)
        except Exception as e:  # noqa: BLE001
            row["error"] = _error_text(e)
            log(f"{self.label()} vanilla: ERROR {row['error']}")
            self.save()
            return False
        row.update(peak_fraction=1.0, tracker_fraction=1.0)
        self.vanilla = row
        self.tasks["vanilla"] = task
        log(f"{self.label()} vanilla: peak {row['peak'] / MiB:.2f} MiB (op level {row['tracker_peak'] / MiB:.2f} MiB) "
            f"[{time.perf_counter() - started:.1f}s]")
        self.save()
        return True

    def peers(self) -> None:
        for name, make in PEERS.items():
            started = time.perf_counter()
            row = self.new_row(name, "peer")
            try:
                net, how = make(self.held)
                row["how"] = how
                task = self.task(net)
                self.peaks(task, row)
                self.tasks[name] = task
                log(f"{self.label()} {name}: peak {row['peak_fraction']:.3f} of vanilla (op level "
                    f"{row['tracker_fraction']:.3f}) [{time.perf_counter() - started:.1f}s]")
            except Exception as e:  # noqa: BLE001
                row["error"] = _error_text(e)
                log(f"{self.label()} {name}: ERROR {row['error'][:300]}")
            self.save()

    # -- the solvers --

    def solver(self, name: str) -> None:
        seen: dict[tuple, str] = {}  # (predicted peak, recompute cost) -> the method measured
        for frac in self.args.budgets:
            self.plan(name, f"{100 * frac:g}%", f"{100 * frac:g}%", seen, budget_fraction=frac)
        if self.args.no_floor:
            return
        started = time.perf_counter()
        if self.graph_module is None:
            self.new_row(f"{name} floor", "remat", solver=name, budget="floor",
                         error=f"no planning graph: {self.graph_error}")
            self.save()
            return
        try:
            low = float(remat.min_budget(self.graph_module.graph, name))
        except RematError as e:
            self.new_row(f"{name} floor", "remat", solver=name, budget="floor", refused=_error_text(e),
                         refused_type=type(e).__name__)
            log(f"{self.label()} {name} floor: refused by min_budget ({_error_text(e)[:200]})")
            self.save()
            return
        floor_seconds = time.perf_counter() - started
        row = self.plan(name, "floor", low, seen, floor_seconds=floor_seconds, floor_bytes=low)
        if "refused" not in row:
            return
        code = row.get("needed")  # the least budget the refusal names: what its reader asks for next
        try:
            code = floor_code_peak(self.graph_module, name) if code is None else float(code)
        except Exception as e:  # noqa: BLE001 -- library internals: say so, do not stop the run
            log(f"{self.label()} {name} floor (code): cannot compute ({_error_text(e)[:200]})")
            return
        if code is not None and code > low * (1 + 1e-6):
            self.plan(name, "floor (code)", code, seen, floor_bytes=low, floor_code_peak=code)

    def plan(self, solver: str, tag: str, spec: str | float, seen: dict[tuple, str], **extra: Any) -> dict[str, Any]:
        """``remat.optimize`` within ``spec`` (a percentage string, or bytes), its predicted and
        measured peaks; a refusal or failure is a row."""
        method = f"{solver} {tag}"
        row = self.new_row(method, "remat", solver=solver, budget=tag, **extra)
        if not isinstance(spec, str):
            row["requested_bytes"] = float(spec)
        started = time.perf_counter()
        extra_opts = {"cost": self.args.cost} if self.args.cost else {}
        try:
            with heldout.autocast("cpu", self.dtype):
                module = remat.optimize(self.held.model, self.held.inputs, spec, solver=solver, **extra_opts)
        except RematError as e:
            row.update(refused=_error_text(e), refused_type=type(e).__name__,
                       plan_seconds=time.perf_counter() - started, needed=getattr(e, "needed", None))
            log(f"{self.label()} {method}: refused ({type(e).__name__}: {str(e)[:240]}) [{row['plan_seconds']:.1f}s]")
            self.save()
            return row
        except Exception as e:  # noqa: BLE001 -- a solver failing must not lose the others
            row.update(error=_error_text(e), plan_seconds=time.perf_counter() - started)
            print(traceback.format_exc(limit=-4), file=sys.stderr, flush=True)
            log(f"{self.label()} {method}: ERROR {row['error'][:300]} [{row['plan_seconds']:.1f}s]")
            self.save()
            return row
        row["plan_seconds"] = time.perf_counter() - started
        row.update(_report_fields(module.report))
        key = (_sig(row.get("predicted_peak")), _sig(row.get("recompute_cost")))
        twin = seen.get(key)
        if twin is not None:
            row["same_as"] = twin
            log(f"{self.label()} {method}: same plan as {twin} (predicted peak {row['predicted_peak_fraction']:.3f}, "
                f"recompute {row['recompute_fraction']:.4f}) [{row['plan_seconds']:.1f}s]")
            self.save()
            return row
        seen[key] = method
        try:
            task = self.task(module)
            self.peaks(task, row)
            self.tasks[method] = task
        except Exception as e:  # noqa: BLE001
            row["error"] = f"measuring: {_error_text(e)}"
            log(f"{self.label()} {method}: ERROR {row['error'][:300]}")
            self.save()
            return row
        _checks(row)
        log(f"{self.label()} {method}: budget {row['budget_bytes'] / MiB:.3f} MiB, predicted peak "
            f"{row['predicted_peak_fraction']:.3f} recompute {row['recompute_fraction']:.4f} "
            f"({row.get('chosen', solver)}); measured peak {row['peak_fraction']:.3f} (op level "
            f"{row['tracker_fraction']:.3f}), measured/budget {row['peak_over_budget']:.3f}, predicted/measured "
            f"{row['predicted_over_measured']:.3f} [{time.perf_counter() - started:.1f}s]")
        self.save()
        return row

    # -- timing --

    def timing(self) -> None:
        args = self.args
        log(f"{self.label()} timing {len(self.tasks)} methods round-robin: {args.warmup} warm-up + {args.steps} rounds")
        started = time.perf_counter()
        steps: dict[str, Callable[[], None]] = {}
        for name, task in self.tasks.items():
            try:
                steps[name] = train_step(Bound(task, self.held.inputs), (), _identity)
            except Exception as e:  # noqa: BLE001
                self._row(name)["error"] = f"timing: {_error_text(e)}"
        if "vanilla" not in steps:
            return
        times = interleave(steps, repeats=args.steps, warmup=args.warmup)
        ratios = time_ratios(times, "vanilla")
        for name, ts in times.items():
            row = self._row(name)
            row["step_seconds"] = sorted(ts)[len(ts) // 2]
            row["time_ratio"] = ratios[name]
        for row in self.rows:  # plans measured under another row's name
            if "same_as" in row:
                src = self._row(row["same_as"])
                for k in ("peak", "tracker_peak", "peak_fraction", "tracker_fraction", "step_seconds", "time_ratio"):
                    if k in src:
                        row[k] = src[k]
                _checks(row)
        for name in times:
            row = self._row(name)
            log(f"{self.label()} {name}: time x{row['time_ratio']:.3f} ({1e3 * row['step_seconds']:.1f} ms), "
                f"peak x{row.get('peak_fraction', float('nan')):.3f}")
        log(f"{self.label()} timed in {time.perf_counter() - started:.1f}s")
        self.save()

    def _row(self, method: str) -> dict[str, Any]:
        return next(r for r in self.rows if r["method"] == method)

    def planning_graph(self) -> None:
        """The planning graph every solver's floor is taken on: the one ``remat.optimize`` builds
        for this model (the same trace at every budget), from a plan that recomputes nothing
        (``verify=False``: a percentage of the simulated peak, so the plain step always fits)."""
        started = time.perf_counter()
        try:
            with heldout.autocast("cpu", self.dtype):
                self.graph_module = remat.optimize(self.held.model, self.held.inputs, "100%", solver="none",
                                                   verify=False, **({"cost": self.args.cost} if self.args.cost else {}))
        except Exception as e:  # noqa: BLE001
            self.graph_error = _error_text(e)
            log(f"{self.label()} planning graph: ERROR {self.graph_error[:300]}")
            return
        graph = self.graph_module.graph
        rep = self.graph_module.report
        self.info.update(graph_nodes=len(graph), plain_simulated_peak=rep.vanilla_predicted_peak,
                         plain_code_peak=rep.predicted_peak)
        log(f"{self.label()} planning graph: {len(graph)} nodes, plain step simulated "
            f"{self.graph_module.report.vanilla_predicted_peak / MiB:.2f} MiB, generated code "
            f"{self.graph_module.report.predicted_peak / MiB:.2f} MiB [{time.perf_counter() - started:.1f}s]")

    def run(self) -> list[dict[str, Any]]:
        if not self.baseline():
            return self.rows
        self.peers()
        if not self.args.no_floor:
            self.planning_graph()
        for name in self.args.solvers:
            self.solver(name)
            gc.collect()
        self.timing()
        return self.rows


def _sig(x: Any) -> Any:
    return float(f"{x:.9g}") if isinstance(x, (int, float)) else x


def _report_fields(rep: Any) -> dict[str, Any]:
    """The predicted side of a plan, from ``module.report`` (``remat.report.Report``)."""
    def get(key: str) -> Any:
        v = rep.get(key) if hasattr(rep, "get") else getattr(rep, key, None)
        return v if isinstance(v, (int, float, str, bool)) else None

    out: dict[str, Any] = {}
    for src, dst in (("budget", "budget_bytes"), ("predicted_peak", "predicted_peak"),
                     ("simulated_peak", "simulated_peak"), ("vanilla_predicted_peak", "vanilla_predicted_peak"),
                     ("vanilla_measured_peak", "verify_vanilla_peak"), ("measured_peak", "verify_peak"),
                     ("method", "verify_method"), ("verify_rounds", "verify_rounds"),
                     ("recompute_cost", "recompute_cost"), ("forward_cost", "forward_cost"),
                     ("recompute_fraction", "recompute_fraction"), ("time_ratio", "predicted_time_ratio"),
                     ("solver", "chosen"), ("kept", "kept"), ("planning_seconds", "remat_planning_seconds"),
                     ("compile_seconds", "remat_compile_seconds")):
        v = get(src)
        if v is not None:
            out[dst] = v
    if out.get("predicted_peak") is not None and out.get("vanilla_predicted_peak"):
        out["predicted_peak_fraction"] = out["predicted_peak"] / out["vanilla_predicted_peak"]
    notes = getattr(rep, "notes", None)
    if notes:
        out["notes"] = [str(n) for n in notes]
    return out


def _checks(row: dict[str, Any]) -> None:
    """What the runtime promises, computed (never asserted here): measured peak within the budget
    (+1%), and the generated code's predicted peak against the measured ones."""
    b, p = row.get("budget_bytes"), row.get("predicted_peak")
    if b and "peak" in row:
        row["peak_over_budget"] = row["peak"] / b
        row["tracker_over_budget"] = row["tracker_peak"] / b
    if p and row.get("peak"):
        row["predicted_over_measured"] = p / row["peak"]
        row["predicted_over_tracker"] = p / row["tracker_peak"]


def _error_text(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:800]


# ---- output ----------------------------------------------------------------------------------


def _fmt(v: Any, spec: str, scale: float = 1.0) -> str:
    return format(v / scale, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = ["# Predicted and measured frontier of each solver on the held-out CPU models", "",
             f"`{result['command']}`", "",
             f"torch {result['machine'].get('torch')}, {result['machine'].get('platform', '')}; "
             f"{s['threads']} thread(s); "
             f"{s['steps']} timed rounds after {s['warmup']} warm-up, all methods of a model interleaved; budgets "
             f"{', '.join(f'{100 * b:g}%' for b in s['budgets'])} of the measured vanilla peak and each solver's "
             "floor (`remat.min_budget` on the planning graph, bytes; where optimize refuses it, also the floor "
             "plan's generated-code peak, 'floor (code)').", "",
             "Predicted peak = the generated code's own peak / the plain step's simulated peak; recompute = "
             f"recomputed cost / one forward's ({s.get('cost', 'flops')} costs). Measured peak = allocator-level "
             "(torch.profiler replay, "
             "`remat.measure` method 'profiler') / vanilla's; op level = `remat.measure` 'tracker' / vanilla's. "
             "Time = median over rounds of the step / vanilla's step in the same round. meas/budget = allocator "
             "peak / budget bytes; pred/meas = predicted peak / allocator peak.", ""]
    for key, info in result["models"].items():
        rows = [r for r in result["rows"] if f"{r['model']}/{r['dtype']}" == key]
        van = next((r for r in rows if r["method"] == "vanilla"), {})
        lines += [f"## {key}: {info['source']}", "",
                  f"Size: {json.dumps(info['size'])}. Vanilla: {_fmt(van.get('peak'), '.2f', MiB)} MiB allocator "
                  f"level, {_fmt(van.get('tracker_peak'), '.2f', MiB)} MiB op level, step "
                  f"{_fmt(van.get('step_seconds'), '.1f', 1e-3)} ms." +
                  (f" Planning graph: {info['graph_nodes']} nodes; the plain step simulated "
                   f"{_fmt(info['plain_simulated_peak'], '.2f', MiB)} MiB, its generated code "
                   f"{_fmt(info['plain_code_peak'], '.2f', MiB)} MiB." if "graph_nodes" in info else ""), ""]
        head = ("| solver | budget | budget MiB | pred. peak / vanilla | pred. recompute / fwd | meas. peak / vanilla "
                "| op level / vanilla | time / vanilla | meas/budget | pred/meas | plan s | notes |")
        lines += [head, "|" + "---|" * (head.count("|") - 1)]
        for r in rows:
            if r["kind"] != "remat":
                continue
            note = r.get("refused") and f"refused: {r['refused']}" or r.get("error") and f"ERROR {r['error']}" or ""
            if not note:
                bits = []
                if r.get("chosen") and r["chosen"] != r["solver"]:
                    bits.append(f"plan of {r['chosen']}")
                if r.get("same_as"):
                    bits.append(f"same plan as {r['same_as']}")
                note = "; ".join(bits)
            budget = r.get("budget_bytes", r.get("requested_bytes"))
            lines.append(f"| {r['solver']} | {r['budget']} | {_fmt(budget, '.3f', MiB)} | "
                         f"{_fmt(r.get('predicted_peak_fraction'), '.3f')} | "
                         f"{_fmt(r.get('recompute_fraction'), '.4f')} | "
                         f"{_fmt(r.get('peak_fraction'), '.3f')} | {_fmt(r.get('tracker_fraction'), '.3f')} | "
                         f"{_fmt(r.get('time_ratio'), '.3f')} | {_fmt(r.get('peak_over_budget'), '.3f')} | "
                         f"{_fmt(r.get('predicted_over_measured'), '.3f')} | {_fmt(r.get('plan_seconds'), '.1f')} | "
                         f"{note.replace('|', '/')[:300]} |")
        lines += ["", "Peers (same run and harness):", "",
                  "| method | meas. peak / vanilla | op level / vanilla | time / vanilla | step ms | how |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            if r["kind"] == "remat":
                continue
            lines.append(f"| {r['method']} | {_fmt(r.get('peak_fraction'), '.3f')} | "
                         f"{_fmt(r.get('tracker_fraction'), '.3f')} | {_fmt(r.get('time_ratio'), '.3f')} | "
                         f"{_fmt(r.get('step_seconds'), '.1f', 1e-3)} | "
                         f"{(r.get('error') or r.get('how') or '').replace('|', '/')[:200]} |")
        if info.get("figure"):
            lines += ["", f"![frontier]({info['figure']})"]
        lines.append("")
    return "\n".join(lines)


PEER_MARKERS = {"vanilla": ("X", "black"), "per-block checkpoint": ("^", "dimgrey"), "sac-matmul": ("D", "dimgrey")}


def plot(rows: list[dict[str, Any]], solvers: list[str], title: str, path: Path,
         plain: float | None = None, cost: str = "flops") -> bool:
    """Left: each solver's predicted frontier; right: the measured one, with the peers. ``plain``:
    the generated code's peak of the plain step (nothing recomputed) on the left panel's scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.8))
    cmap = plt.get_cmap("tab10" if len(solvers) <= 10 else "tab20")
    for i, name in enumerate(solvers):
        color = cmap(i % cmap.N)
        mine = [r for r in rows if r["kind"] == "remat" and r["solver"] == name and "error" not in r
                and "refused" not in r]
        pred = sorted((r["predicted_peak_fraction"], r["recompute_fraction"], r["budget"]) for r in mine
                      if "predicted_peak_fraction" in r and "recompute_fraction" in r)
        meas = sorted((r["peak_fraction"], r["time_ratio"], r["budget"]) for r in mine
                      if "peak_fraction" in r and "time_ratio" in r)  # same_as rows: their twin's numbers
        style = dict(color=color, lw=2.5 if name == "auto" else 1.2,
                     ls="-" if name == "auto" else ("-", "--", ":")[i % 3],
                     alpha=0.8)
        for ax, pts in ((left, pred), (right, meas)):
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=name, **style)
            for x, y, b in pts:
                ax.scatter([x], [y], color=color, s=45 if b.startswith("floor") else 18,
                           marker="s" if b.startswith("floor") else "o", zorder=4)
    left.scatter([1.0], [0.0], marker="X", color="black", s=70, zorder=5, label="vanilla", edgecolors="white")
    if plain:
        left.scatter([plain], [0.0], marker="P", color="dimgrey", s=60, zorder=5,
                     label="plain step, generated code")
    for r in rows:
        if r["kind"] != "remat" and "peak_fraction" in r and "time_ratio" in r:
            marker, color = PEER_MARKERS.get(r["method"], ("P", "grey"))
            right.scatter([r["peak_fraction"]], [r["time_ratio"]], marker=marker, color=color, s=70, zorder=5,
                          label=r["method"], edgecolors="white")
    left.set_xlabel("predicted activation peak / vanilla (generated code / simulated plain step)")
    left.set_ylabel(f"predicted recompute cost / one forward ({cost} costs)")
    left.set_yscale("symlog", linthresh=0.01)
    left.set_ylim(bottom=-0.001)
    left.set_title("predicted (remat.optimize report)", fontsize=9)
    right.set_xlabel("measured peak / vanilla (CPU allocator, torch.profiler replay)")
    right.set_ylabel("step time / vanilla (median of interleaved rounds)")
    right.set_title("measured (same run, same harness)", fontsize=9)
    right.axhline(1.0, color="grey", lw=0.5)
    for ax in (left, right):
        ax.axvline(1.0, color="grey", lw=0.5)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, ncol=2)
    fig.suptitle(title + "\n(squares: the solver's floor)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _size(held: heldout.HeldOut) -> dict[str, Any]:
    keep = ("batch", "seq", "n_layer", "n_embd", "n_head", "num_hidden_layers", "hidden_size", "intermediate_size",
            "num_attention_heads", "num_key_value_heads", "vocab_size")
    return {k: held.config[k] for k in keep if k in held.config}


# ---- main ------------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help=f"comma-separated, of {', '.join(MODELS)} (default: all)")
    ap.add_argument("--solvers", help=f"comma-separated training solvers (default: {','.join(SOLVERS)}; "
                                      f"{','.join(QUICK_SOLVERS)} with --quick)")
    ap.add_argument("--budgets", help="fractions of the vanilla peak (default 0.9,0.7,0.5,0.3; 0.7 with --quick)")
    ap.add_argument("--no-floor", action="store_true", help="skip each solver's floor")
    ap.add_argument("--cost", help="remat.optimize's cost= (default: remat.optimize's own default)")
    ap.add_argument("--dtypes", default="fp32", help="fp32 and/or bf16 (autocast), comma-separated")
    ap.add_argument("--steps", type=int, help="timed round-robin rounds (default 10; 2 with --quick)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed round-robin rounds first")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny models, 2 solvers, 70%% and the floor, 2 rounds")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    args.size = "quick" if args.quick else "cpu"
    args.models = (args.models or ",".join(MODELS)).split(",")
    for m in args.models:
        if m not in MODELS:
            ap.error(f"unknown model {m!r}: use {', '.join(MODELS)}")
    args.solvers = (args.solvers or ",".join(QUICK_SOLVERS if args.quick else SOLVERS)).split(",")
    known = set(remat.solvers.names("training"))
    for s in args.solvers:
        if s not in known:
            ap.error(f"unknown solver {s!r}: use {', '.join(sorted(known))}")
    args.budgets = tuple(float(b) for b in args.budgets.split(",")) if args.budgets else \
        (QUICK_BUDGETS if args.quick else BUDGETS)
    if any(not 0.0 < b < 1.0 for b in args.budgets):
        ap.error("--budgets are fractions in (0, 1)")
    args.dtypes = args.dtypes.split(",")
    for d in args.dtypes:
        if d not in DTYPES:
            ap.error(f"unknown dtype {d!r}: use {', '.join(DTYPES)}")
    args.steps = args.steps if args.steps is not None else (2 if args.quick else 10)
    args.cost_name = args.cost or str(inspect.signature(remat.optimize).parameters["cost"].default)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _main(args, out, argv)
    finally:
        torch.set_num_threads(threads)


def _main(args: argparse.Namespace, out: Path, argv: list[str] | None) -> int:
    argv_list = sys.argv[1:] if argv is None else list(argv)
    script = os.path.relpath(__file__, ROOT) if Path(__file__).resolve().is_relative_to(ROOT) else __file__
    result: dict[str, Any] = {
        **provenance(["python", script, *argv_list]), "torch": torch.__version__,
        "settings": {"models": args.models, "solvers": args.solvers, "budgets": list(args.budgets),
                     "floor": not args.no_floor, "cost": args.cost_name, "dtypes": args.dtypes, "size": args.size,
                     "steps": args.steps,
                     "warmup": args.warmup, "threads": args.threads, "seed": args.seed},
        "peak_method": "CPU allocator-level peak replayed from torch.profiler(profile_memory=True) allocations and "
                       "frees (remat.measure method 'profiler', parameter gradients left out); op level: "
                       "remat.measure method 'tracker'",
        "models": {}, "rows": []}
    done: list[dict[str, Any]] = []

    def save(current: list[dict[str, Any]] | None = None) -> None:
        result["rows"] = done + (current or [])
        (out / "results.json").write_text(json.dumps(result, indent=1, default=str))

    total = time.perf_counter()
    for name in args.models:
        for dtype_name in args.dtypes:
            key = f"{name}/{dtype_name}"
            started = time.perf_counter()
            log(f"[{name} {dtype_name}] building ({args.size} size)")
            try:
                held = build(name, args.size, args.seed)
            except Exception as e:  # noqa: BLE001
                done.append({"model": name, "dtype": dtype_name, "method": "all", "kind": "vanilla",
                             "error": f"build: {_error_text(e)}"})
                log(f"[{name} {dtype_name}] build failed: {e}")
                save()
                continue
            result["models"][key] = {"source": held.source, "size": _size(held)}
            # remat.measure collects garbage before each measured step: with the imports' objects
            # frozen out of the collector that takes milliseconds instead of half a second
            gc.collect()
            gc.freeze()
            run = Run(held, dtype_name, args, save)
            run.info = result["models"][key]
            try:
                rows = run.run()
            finally:
                gc.unfreeze()
            done.extend(rows)
            fig = out / f"frontier_{name}_{dtype_name}.png"
            source = held.source if len(held.source) <= 110 else held.source[:107] + "..."
            title = f"{name} {dtype_name}, CPU ({args.threads} thread(s)): {source}"
            try:
                info = result["models"][key]
                plain = info["plain_code_peak"] / info["plain_simulated_peak"] if info.get("plain_simulated_peak") \
                    else None
                if plot(rows, args.solvers, title, fig, plain, args.cost_name):
                    result["models"][key]["figure"] = fig.name
            except Exception as e:  # noqa: BLE001 -- no matplotlib: the numbers still count
                log(f"[{name} {dtype_name}] no figure: {_error_text(e)}")
            result["models"][key]["seconds"] = time.perf_counter() - started
            save()
            (out / "report.md").write_text(markdown(result))
            log(f"[{name} {dtype_name}] done in {time.perf_counter() - started:.0f}s")
            del run, held, rows
            gc.collect()
    result["total_seconds"] = time.perf_counter() - total
    save()
    (out / "report.md").write_text(markdown(result))
    log(f"wrote {out / 'results.json'}, {out / 'report.md'} ({result['total_seconds']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
