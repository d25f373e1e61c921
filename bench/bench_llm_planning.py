"""auto on captured LLM graphs: planning seconds, what it chose, and whether any solver beat it.

    .venv/bin/python bench/bench_llm_planning.py [--quick] [--out bench/results/llm_planning]

Models from public-style configs with Hugging Face's defaults (``use_cache`` dropped in
training by remat): ``LlamaForCausalLM`` with 32 layers and ``GPT2LMHeadModel`` with 48 layers,
hidden 64, vocabulary 1000, batch 2, sequence 32 (the graph's size is set by the layer count,
not the width). Each is captured as ``remat.optimize`` captures it (AOTAutograd joint graph,
``m = remat.optimize(model, inputs, budget="100%", verify=False); m.graph``), then
``remat.solve(g, budget, solver="auto")`` runs at 90/70/50/30% of the vanilla simulated peak
with its default 30 s limit, and ``remat.min_budget(g, "auto")``. For each budget every auto
candidate is also asked alone (the judged search auto runs for it, with 60 s to itself instead
of its share of auto's 30 s) to check that auto's plan recomputes no more than any of them. Times are wall seconds on whatever machine runs
it (the committed figures: this 2-core CPU, nothing else running).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import transformers

import remat
from remat import schedule
from remat.machine import provenance
from remat.solvers import auto

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "llm_planning"
FRACTIONS = (0.9, 0.7, 0.5, 0.3)
ALONE_SECONDS = 60.0  # each candidate alone: auto's search for it, stopped after this


def models(quick: bool) -> dict[str, Any]:
    """name -> (model, inputs), built as a user would from a config."""
    torch.manual_seed(0)
    layers_llama, layers_gpt2 = (4, 4) if quick else (32, 48)
    llama = transformers.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=layers_llama, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=64)
    gpt2 = transformers.GPT2Config(vocab_size=1000, n_embd=64, n_layer=layers_gpt2, n_head=4, n_positions=64,
                                   bos_token_id=0, eos_token_id=0)
    ids = torch.randint(0, 1000, (2, 32))
    return {f"llama-{layers_llama}": (transformers.LlamaForCausalLM(llama), {"input_ids": ids}),
            f"gpt2-{layers_gpt2}": (transformers.GPT2LMHeadModel(gpt2), {"input_ids": ids})}


def run(quick: bool, alone_too: bool = True) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for name, (model, inputs) in models(quick).items():
        t = time.perf_counter()
        g = remat.optimize(model, inputs, budget="100%", verify=False).graph
        capture_s = time.perf_counter() - t
        vanilla = remat.simulate(g, schedule.vanilla(g)).peak
        forward = g.cost(g.order)
        print(f"{name}: {len(g)} nodes, captured in {capture_s:.1f} s", flush=True)
        t = time.perf_counter()
        floor = remat.min_budget(g, solver="auto")
        floor_s = time.perf_counter() - t
        for frac in FRACTIONS:
            budget = frac * vanilla
            plan = remat.solve(g, budget, solver="auto")
            alone = {}
            for cand in auto.default_candidates() if alone_too else ():
                started = time.perf_counter()
                try:  # the search auto runs for a candidate, given ALONE_SECONDS of its own
                    p, _, cut = auto._candidate(g, budget, cand, "time", started + ALONE_SECONDS, {})
                except auto._TimedOut:
                    alone[cand] = {"cut_short": f"no answer within {ALONE_SECONDS:.0f} s"}
                    continue
                except (ValueError, RuntimeError) as e:
                    alone[cand] = {"skipped": str(e)[:120]}
                    continue
                ok = p is not None and p.feasible
                alone[cand] = {"feasible": ok, "peak": p.peak / vanilla if p is not None else None,
                               "recompute": p.recompute_cost / forward if ok else None,
                               "seconds": time.perf_counter() - started, "cut_short": cut}
            best_alone = min((a["recompute"] for a in alone.values() if a.get("feasible")), default=None)
            row = {"model": name, "nodes": len(g), "capture_seconds": capture_s, "budget": frac,
                   "seconds": plan.solve_seconds, "feasible": plan.feasible, "chosen": plan.stats.get("chosen"),
                   "peak": plan.peak / vanilla, "recompute": plan.recompute_cost / forward,
                   "cut_short": plan.stats.get("cut_short", {}), "best_alone": best_alone,
                   "floor": floor / vanilla, "floor_seconds": floor_s, "alone": alone}
            rows.append(row)
            print(f"  {frac:.0%}: {plan.solve_seconds:5.1f} s  {row['chosen']:<24} peak {row['peak']:.3f}  "
                  f"recompute {row['recompute']:.4f} of a forward (best alone {best_alone})  "
                  f"cut short: {', '.join(row['cut_short']) or '-'}", flush=True)
        print(f"  floor (min_budget auto) {floor / vanilla:.3f} of vanilla in {floor_s:.1f} s", flush=True)
    return {"provenance": provenance(), "command": " ".join(sys.argv), "rows": rows}


def report(data: dict[str, Any]) -> str:
    lines = ["# auto on captured LLM graphs", "", f"Command: `{data['command']}`", "",
             "| model | nodes | budget | auto s | chosen | peak / vanilla | recompute / forward | best single solver | cut short |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in data["rows"]:
        best = "-" if r["best_alone"] is None else f"{r['best_alone']:.4f}"
        lines.append(f"| {r['model']} | {r['nodes']} | {r['budget']:.0%} | {r['seconds']:.1f} | {r['chosen']} | "
                     f"{r['peak']:.3f} | {r['recompute']:.4f} | {best} | {', '.join(r['cut_short']) or '-'} |")
    floors = {r["model"]: (r["floor"], r["floor_seconds"]) for r in data["rows"]}
    lines += ["", "Floor (`remat.min_budget(g, 'auto')`): " + "; ".join(
        f"{m} {f:.3f} of vanilla in {s:.1f} s" for m, (f, s) in floors.items())]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4-layer models (the test's smoke run)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--auto-only", action="store_true", help="time auto alone (skip asking each candidate alone)")
    args = ap.parse_args()
    data = run(args.quick, alone_too=not args.auto_only)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(data, indent=1, default=str))
    (args.out / "report.md").write_text(report(data))
    print(report(data))


if __name__ == "__main__":
    main()
