"""Gradients of outputs the loss does not use, under torch.compile: memory with and without them.

A transformers causal LM given ``labels`` returns its loss, its logits and (the config's default
``use_cache=True``) every layer's key and value cache. Plain torch.compile's autograd function hands
its backward zeros for each output no gradient reached; ``remat.backend`` does not allocate them
(``remat/compiled/tangents.py``). This measures, on a held-out model with default arguments, the
step's peak (profiler replay, parameter gradients excluded) of eager, per-block checkpointing,
torch.compile at ``activation_memory_budget`` 1.0 and 0.5, and ``remat.backend`` with each compiler
at "100%" and at per-block checkpointing's measured peak, with each remat plan's predicted peak.

    python bench/bench_output_grads.py --models llama,gpt2 --out bench/results/output_grads_cpu
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.measure import measure  # noqa: E402


def run(name: str, size: str = "cpu", compilers: tuple[str, ...] = ("eager", "inductor"),
        peers: tuple[float, ...] = (1.0, 0.5)) -> dict:
    """The rows for one model: eager, per-block, torch.compile at each of ``peers``
    (``activation_memory_budget``), remat.backend with each of ``compilers`` at both budgets."""
    held = heldout.build(name, "cpu", size)
    torch.manual_seed(0)
    ids = torch.randint(0, held.config["vocab_size"], (held.config["batch"], held.config["seq"]))
    inputs = {"input_ids": ids, "labels": ids}

    def peak(net: torch.nn.Module) -> int:
        return measure(heldout.Task(net, "lm"), inputs, method="profiler").peak

    rows = {"eager": {"peak": peak(copy.deepcopy(held.model))}}
    rows["per-block"] = {"peak": peak(heldout.per_block(held)[0])}
    for b in peers:
        torch._dynamo.reset()
        with torch._functorch.config.patch(activation_memory_budget=b):
            rows[f"torch.compile b={b}"] = {"peak": peak(torch.compile(copy.deepcopy(held.model)))}
    for compiler in compilers:
        for label, budget in (("100%", "100%"), ("at per-block's peak", int(rows["per-block"]["peak"]))):
            torch._dynamo.reset()
            be = remat.backend(budget=budget, compiler=compiler)
            key = f"remat.backend {compiler} {label}"
            try:
                got = peak(torch.compile(copy.deepcopy(held.model), backend=be))
            except Exception as e:  # noqa: BLE001 -- a refusal is a result
                rows[key] = {"error": str(e).split("\n\nSet TORCHDYNAMO")[0].strip()[-700:]}
                continue
            rep = be.report[-1]
            rows[key] = {"peak": got, "budget": budget, "predicted_peak": rep["predicted_peak"],
                         "chosen": rep["chosen"], "graphs": len(be.report),
                         "unused_gradients_note": any("assumed never to come" in n for n in rep["notes"])}
    torch._dynamo.reset()
    for row in rows.values():
        if "peak" in row:
            row["fraction_of_eager"] = row["peak"] / rows["eager"]["peak"]
    for k, v in rows.items():
        print(f"{name} {k}: " + (f"{v['peak']} ({v['fraction_of_eager']:.3f})" if "peak" in v else v["error"]),
              flush=True)
    return {"model": name, "source": held.source, "inputs": "input_ids and labels, batch x seq "
            f"{held.config['batch']} x {held.config['seq']}, default arguments", "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama,gpt2")
    ap.add_argument("--size", default="cpu", choices=heldout.SIZES)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    result = {"command": " ".join(["python", *sys.argv]), "torch": torch.__version__, "platform": platform.platform(),
              "threads": torch.get_num_threads(), "models": [run(m, args.size) for m in args.models.split(",")]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
