"""Planning only: remat eager (``remat.optimize``, auto, default costs: the roofline on the CPU) on the CPU-size
held-out models at "50%" and at the eager peers' measured peaks, with every op the roofline prices at 10 us or more
timed on the device ("heavy": a change tried), with matmuls, attention, layer norms and softmaxes timed ("kinds"),
and as committed ("old": only ``costs.TIMED``). Prints each plan's solver, recomputation (a fraction of a forward, in
its own costs), predicted recompute seconds, the same ops' ``cost="profile"`` seconds and the predicted peak.
argv: models (comma list). Writes $OUT/plans.json."""
import contextlib
import functools
import sys
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parent / "selective_chains_cpu"),
                str(HERE.parent / "timed_attention_cpu")]
from plans import describe  # noqa: E402
from plans_eager import compare  # noqa: E402
from remat.compiled import costs  # noqa: E402

KINDS = costs.TIMED | {"mm", "addmm", "bmm", "baddbmm", "native_layer_norm", "_softmax", "_safe_softmax",
                       *costs._ATTENTION}
was = costs.timed_kind


def by_price(n) -> bool:  # noqa: ANN001 -- fx.Node
    return was(n) or (costs.node_device(n) is not None and costs.roofline(n) >= 1e-5)


def by_kind(n) -> bool:  # noqa: ANN001 -- fx.Node
    packet = getattr(n.target, "overloadpacket", None)
    return packet is not None and packet.__name__ in KINDS


def main() -> None:
    variants = {"heavy": functools.partial(mock.patch.object, costs, "timed_kind", by_price),
                "kinds": functools.partial(mock.patch.object, costs, "timed_kind", by_kind),
                "old": contextlib.nullcontext}
    compare(sys.argv[1], variants, describe, "plans.json")


if __name__ == "__main__":
    main()
