"""A/A of the A/B harness (``bench/ab_inductor.py``): the same ``remat.optimize`` plan made twice ("first" and
"second": the same op-time cache, the floors cache cleared between), timed interleaved against vanilla in one
process, to show the harness's own resolution. argv: model, dtype, budget[, rounds (30)]. Writes $OUT/ab_aa_MODEL_DTYPE.json."""
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]
from ab_inductor import AB  # noqa: E402
from remat.judge import forget_floors  # noqa: E402

if __name__ == "__main__":
    name, dtype, budget = sys.argv[1:4]
    ab = AB(name, dtype)
    ab.add("vanilla", ab.held.model)
    for label in ("first", "second"):
        forget_floors()
        ab.optimized(label, budget)
    ab.name = f"aa_{name}"
    ab.finish(int(sys.argv[4]) if len(sys.argv) > 4 else 30, reference="vanilla")
