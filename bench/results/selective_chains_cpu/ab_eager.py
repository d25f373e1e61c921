"""A/B of remat eager (``remat.optimize``, auto) with ``selective-chains`` among auto's candidates ("new", as
committed) and without it ("old", ``plans_eager.old``), timed interleaved against vanilla in one process.
argv: model, dtype, budget ("50%", or "per-block": per-block checkpointing's measured peak in
``compiled_cpu/eager_all_calibrated_b1ec090``, planned with no tolerance over it)[, rounds (30)]."""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]
from ab_inductor import AB  # noqa: E402
from plans_eager import PEERS, old  # noqa: E402
from remat.judge import forget_floors  # noqa: E402


def main(old_context) -> None:  # noqa: ANN001 -- a context manager factory
    """The A/B of argv's model, dtype and budget: "new" as committed, "old" planned under ``old_context()``."""
    name, dtype, which = sys.argv[1:4]
    ab = AB(name, dtype)
    ab.add("vanilla", ab.held.model)
    options = {}
    budget = which
    if which == "per-block":
        rows = json.loads(PEERS.read_text())["rows"]
        budget = int(next(r["peak"] for r in rows if r["model"] == name and r["dtype"] == dtype
                          and r["method"] == "per-block checkpoint"))
        options["tolerance"] = 0.0
    forget_floors()  # (floors are cached by the graph's content: each plan seeks its own)
    ab.optimized("new", budget, **options)
    forget_floors()
    ab.optimized("old", budget, during=old_context, **options)
    ab.name = f"{name}_{which.rstrip('%')}"
    ab.finish(int(sys.argv[4]) if len(sys.argv) > 4 else 30, reference="vanilla")


if __name__ == "__main__":
    main(old)
