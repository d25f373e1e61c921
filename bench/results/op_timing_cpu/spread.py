"""How much one op's timed seconds vary between timings: every distinct op ``remat.optimize`` (eager, "50%") times on a
CPU-size held-out model, timed TRIALS times by the median of five runs ("old", ``ab_eager.median_of_five``) and by
``costs._op_seconds`` ("new": the fastest run in a 10 ms window), the two interleaved op by op. Prints, per way, the
median, 90th percentile and largest of each op's slowest / fastest timing, each trial's total, and the summed spread
(slowest minus fastest) over the mean total. argv: model, dtype[, trials (4)]. Writes $OUT/spread_MODEL_DTYPE.json."""
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]
import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402
from ab_eager import median_of_five  # noqa: E402
from ab_inductor import AB  # noqa: E402
from torch import fx  # noqa: E402

import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.compiled import costs  # noqa: E402

WAYS = {"old": median_of_five, "new": costs._op_seconds}


def timed_ops(ab: AB) -> dict:
    """The ops (by cache key) that planning the model at "50%" times, on an empty cache."""
    seen, was = {}, costs.time_op

    def record(n, device):  # noqa: ANN001, ANN202
        seen.setdefault(costs.op_key(n), n)
        return was(n, device)

    with tempfile.TemporaryDirectory() as cache:
        os.environ["REMAT_CACHE_DIR"] = cache
        costs.time_op = record
        try:
            with heldout.autocast("cpu", ab.autocast):
                remat.optimize(ab.held.model, ab.held.inputs, "50%", verify=False)
        finally:
            costs.time_op = was
    return seen


def main() -> None:
    name, dtype = sys.argv[1:3]
    trials = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    ops = timed_ops(AB(name, dtype))
    cpu = torch.device("cpu")
    got = {way: {k: [] for k in ops} for way in WAYS}
    for _ in range(trials):
        for key, n in ops.items():
            with costs.real_mode(), torch.no_grad():
                args, kwargs = pytree.tree_map_only(fx.Node, lambda a: costs._real(a.meta.get("val"), cpu),
                                                    (n.args, n.kwargs))
                for way, timing in WAYS.items():
                    got[way][key].append(timing(lambda: n.target(*args, **kwargs), cpu))
    out = {"model": name, "dtype": dtype, "ops": len(ops), "trials": trials}
    for way, by_op in got.items():
        spread = sorted(max(t) / min(t) for t in by_op.values())
        totals = [sum(t[i] for t in by_op.values()) for i in range(trials)]
        out[way] = {"median": statistics.median(spread), "p90": spread[int(0.9 * len(spread))], "max": spread[-1],
                    "totals_ms": [round(t * 1e3, 3) for t in totals],
                    "summed_spread": sum(max(t) - min(t) for t in by_op.values()) / statistics.mean(totals)}
        print(name, dtype, way, json.dumps(out[way]), flush=True)
    (Path(os.environ.get("OUT", ".")) / f"spread_{name}_{dtype}.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
