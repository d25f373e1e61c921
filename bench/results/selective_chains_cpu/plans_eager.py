"""Planning only: ``remat.optimize`` (eager, default arguments) on the CPU-size held-out models at "50%" and at the
eager peers' measured peaks of ``compiled_cpu/eager_all_calibrated_b1ec090``, with ``selective-chains`` among auto's
candidates (as committed, "new") and without it ("old"). Prints the chosen solver, predicted recomputation
(fraction of a forward) and predicted peak of each, and writes $OUT/plans_eager.json. argv: models (comma list)."""
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "src"))
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.compiled import partitioner  # noqa: E402
from remat.judge import forget_floors  # noqa: E402
from remat.solvers import auto  # noqa: E402

PEERS = ROOT / "bench/results/compiled_cpu/eager_all_calibrated_b1ec090/results.json"


@contextlib.contextmanager
def old():
    """auto without ``selective-chains``, and the eager code's floor search without its chain-limited start."""
    was = auto.default_candidates, partitioner.CHAIN_LIMIT
    auto.default_candidates = lambda: tuple(n for n in was[0]() if n != "selective-chains")
    partitioner.CHAIN_LIMIT = None
    try:
        yield
    finally:
        auto.default_candidates, partitioner.CHAIN_LIMIT = was


def compare(models: str, variants: dict, describe: Callable[[Any], dict], out_name: str) -> None:
    """Each model (comma list) and dtype, at "50%" and at the eager peers' peaks (``PEERS``, no tolerance over them),
    planned by ``remat.optimize`` (verify=False) under each of ``variants`` (label -> context): ``describe(module)``
    (and the planning seconds, or the refusal) per variant, one JSON row per budget printed and in $OUT/``out_name``."""
    torch.set_num_threads(1)
    rows = json.loads(PEERS.read_text())["rows"]
    out = []
    for name in models.split(","):
        held = heldout.build(name, "cpu", "cpu")
        for dtype in ("fp32", "bf16"):
            peaks = {r["method"]: r["peak"] for r in rows if r["model"] == name and r["dtype"] == dtype}
            budgets = [("50%", "50%"), *((f"@{m}", int(peaks[m])) for m in ("per-block checkpoint", "sac-matmul"))]
            for label, budget in budgets:
                row = {"model": name, "dtype": dtype, "budget": label}
                for which, ctx in variants.items():
                    forget_floors()
                    t0 = time.perf_counter()
                    try:
                        with ctx(), heldout.autocast("cpu", torch.bfloat16 if dtype == "bf16" else None):
                            module = remat.optimize(held.model, held.inputs, budget, verify=False,
                                                    **({} if label == "50%" else {"tolerance": 0.0}))
                        row[which] = {**describe(module), "seconds": round(time.perf_counter() - t0, 1)}
                    except Exception as e:  # noqa: BLE001 -- a refused budget is a result
                        row[which] = {"error": f"{type(e).__name__}: {e}"[:300]}
                print(json.dumps(row), flush=True)
                out.append(row)
    Path(os.environ.get("OUT", "."), out_name).write_text(json.dumps(out, indent=1))


def describe_recompute(module: Any) -> dict:
    """A plan's solver, predicted recompute seconds and predicted peak (the later plan comparisons' row)."""
    rep = module.report
    return {"solver": rep.solver, "recompute_s": module.step.planned.prediction.recompute_cost,
            "predicted_peak": rep.predicted_peak}


def main() -> None:
    def describe(module: Any) -> dict:
        rep = module.report
        return {"solver": rep.solver, "recompute_fraction": round(rep.recompute_fraction, 4),
                "predicted_peak": rep.predicted_peak}

    compare(sys.argv[1], {"new": contextlib.nullcontext, "old": old}, describe, "plans_eager.json")


if __name__ == "__main__":
    main()
