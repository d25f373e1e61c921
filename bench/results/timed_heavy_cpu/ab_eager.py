"""A/B of remat eager (``remat.optimize``, auto, the CPU's roofline) with every op it prices at 10 us or more timed
("new", as committed in 22ebff0) and with convolutions and batch norms timed only ("old", the roofline before it),
timed interleaved against vanilla in one process: ``selective_chains_cpu/ab_eager.py``'s A/B, argv as there: model,
dtype, budget ("50%", or "per-block": per-block checkpointing's measured peak, no tolerance over it)[, rounds (30)]."""
import functools
import sys
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent / "selective_chains_cpu")]  # (its ab_eager, not this one)
import ab_eager  # noqa: E402
from remat.compiled import costs  # noqa: E402

old = functools.partial(mock.patch.object, costs, "timed_here",
                        lambda n, price: costs.timed_kind(n) and costs.node_device(n) is not None)

if __name__ == "__main__":
    ab_eager.main(old)
