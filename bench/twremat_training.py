"""TWRemat on the training problem, judged as the runtime runs it: for each graph and budget, the
judged search auto runs for the candidate (``remat.judge``), its recompute cost (of a forward), its
executed peak (of the vanilla peak) and the seconds it took.

    python bench/twremat_training.py OUT.json

Graphs: the layer-level zoo graphs and the captured ones under ``bench/graphs`` (up to 1,200
nodes), and the public GPT-2 (``GPT2Config()``, two sequences of 128 tokens) captured as
``remat.optimize`` captures it. Run it from another checkout with ``PYTHONPATH=<its src>`` to
compare two versions (bench/results/twremat_training_cpu_*).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

GRAPHS = Path(__file__).resolve().parent / "graphs"
FRACTIONS = (0.9, 0.7, 0.5, 0.35)
MAX_NODES = 1200


def graphs() -> dict:
    """name -> Graph."""
    import torch
    import transformers

    import remat
    from remat.graph import Graph

    out = {}
    for f in sorted(GRAPHS.glob("*.json")) + sorted((GRAPHS / "captured").glob("*.json")):
        g = Graph.from_json(f)
        if len(g) <= MAX_NODES:
            out[str(f.relative_to(GRAPHS))] = g
    torch.manual_seed(0)
    cfg = transformers.GPT2Config()
    ids = torch.randint(0, cfg.vocab_size, (2, 128))
    model = transformers.GPT2LMHeadModel(cfg).train()
    out["gpt2 (public config, 2x128)"] = remat.optimize(model, {"input_ids": ids, "labels": ids}, "100%",
                                                         verify=False).graph
    return out


def main(out: str) -> None:
    from remat import schedule, simulate
    from remat.judge import _Search

    rows = []
    for name, g in graphs().items():
        vanilla = simulate(g, schedule.vanilla(g)).peak
        for frac in FRACTIONS:
            started = time.perf_counter()
            plan = _Search(g, frac * vanilla, "twremat", "time", {}).run()
            row = {"graph": name, "nodes": len(g), "budget": frac,
                   "recompute": None if plan is None else round(plan.recompute_cost / g.total_cost(), 4),
                   "peak": None if plan is None else round(plan.peak / vanilla, 4),
                   "seconds": round(time.perf_counter() - started, 3)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    Path(out).write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "rows": rows}, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
