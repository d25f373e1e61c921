"""How long ``remat.optimize`` takes to answer a budget, as a user calls it (verify on), on models
built from public configs: the seconds, the answer (the measured peak, or the refusal and the
budget it names) and how many times it planned.

    python bench/refusal_time.py OUT.json [gpt2:50%,gpt2:60%,...]

Run it from another checkout with ``PYTHONPATH=<its src>`` to compare two versions.
"""

from __future__ import annotations

import copy
import json
import sys
import time

import torch


def _gpt2() -> tuple[torch.nn.Module, dict]:
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config()  # the public GPT-2 (124M): 12 layers, 768 wide, tied embeddings
    ids = torch.randint(0, cfg.vocab_size, (2, 128))
    return transformers.GPT2LMHeadModel(cfg).train(), {"input_ids": ids, "labels": ids}


MODELS = {"gpt2": _gpt2}


def main(out: str, cases: str = "gpt2:50%,gpt2:60%") -> None:
    import remat
    from remat.compiled import partitioner

    plans = []
    plan = partitioner.Planner._plan

    def counted(self, *a, **kw):  # one per planning call (optimize plans again after a step measured over)
        plans.append(1)
        return plan(self, *a, **kw)

    partitioner.Planner._plan = counted
    rows = []
    for case in cases.split(","):
        name, budget = case.split(":")
        model, inputs = MODELS[name]()
        plans.clear()
        started = time.perf_counter()
        row = {"model": name, "budget": budget}
        try:
            rep = remat.optimize(copy.deepcopy(model), inputs, budget).report
            row.update(answer="planned", measured_peak=rep["measured_peak"], predicted_peak=rep["predicted_peak"],
                       vanilla=rep.get("vanilla_measured_peak"), chosen=rep.get("chosen"))
        except remat.InfeasibleError as e:
            row.update(answer="refused", needed=getattr(e, "needed", None), message=str(e))
        row.update(seconds=round(time.perf_counter() - started, 1), plannings=len(plans))
        print(json.dumps(row), flush=True)
        rows.append(row)
    with open(out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
