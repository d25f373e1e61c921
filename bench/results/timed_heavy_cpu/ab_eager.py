"""A/B of remat eager (``remat.optimize``, auto, the CPU's roofline) with every op it prices at 10 us or more timed
("new", as committed in 22ebff0) and with convolutions and batch norms timed only ("old", the roofline before it),
timed interleaved against vanilla in one process. argv as ``selective_chains_cpu/ab_eager.py``: model, dtype,
budget ("50%", or "per-block": per-block checkpointing's measured peak, no tolerance over it)[, rounds (30)]."""
import functools
import json
import sys
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent / "selective_chains_cpu")]
from ab_inductor import AB  # noqa: E402
from plans_eager import PEERS  # noqa: E402
from remat.compiled import costs  # noqa: E402
from remat.judge import forget_floors  # noqa: E402

old = functools.partial(mock.patch.object, costs, "timed_here",
                        lambda n, price: costs.timed_kind(n) and costs.node_device(n) is not None)

if __name__ == "__main__":
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
    ab.optimized("old", budget, during=old, **options)
    ab.name = f"{name}_{which.rstrip('%')}"
    ab.finish(int(sys.argv[4]) if len(sys.argv) > 4 else 30, reference="vanilla")
