"""The ops a remat eager plan recomputes (``remat.optimize`` at a budget, auto, default costs), each timed warm (the
fastest of back-to-back runs in 10 ms) and cold (``costs._op_seconds`` as committed: each run after a write over four
times a core's L2), summed, against the plan's predicted recomputation; the ten kinds of op with the most cold time.
Compare with the step's measured time over vanilla's less the no-recompute code's (``eager_all_*``). argv: model,
dtype, budget. Prints one JSON line."""
import json
import sys
from pathlib import Path
from unittest import mock

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]
import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402
from ab_inductor import AB  # noqa: E402
from torch import fx  # noqa: E402

import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.compiled import costs  # noqa: E402


def main() -> None:
    name, dtype, budget = sys.argv[1:4]
    ab = AB(name, dtype)
    with heldout.autocast("cpu", ab.autocast):
        planned = remat.optimize(ab.held.model, ab.held.inputs, budget, verify=False).step.planned
    seen, again = set(), []
    for kind, v in planned.steps:
        if kind == "fwd":
            if v in seen and planned.joint.node_of.get(v) is not None:
                again.append(planned.joint.node_of[v])
            seen.add(v)
    cpu, by_kind, total = torch.device("cpu"), {}, {"warm": 0.0, "cold": 0.0}
    for n in again:
        if costs.unrunnable(n):
            continue
        with costs.real_mode(), torch.no_grad():
            args, kwargs = pytree.tree_map_only(fx.Node, lambda a: costs._real(a.meta.get("val"), cpu),
                                                (n.args, n.kwargs))
            with mock.patch.object(costs, "_evict", lambda: (lambda: None)):
                warm = costs._op_seconds(lambda: n.target(*args, **kwargs), cpu)
            cold = costs._op_seconds(lambda: n.target(*args, **kwargs), cpu)
        row = by_kind.setdefault(costs.op_name(n.target), {"ops": 0, "warm_ms": 0.0, "cold_ms": 0.0})
        row["ops"] += 1
        row["warm_ms"] += warm * 1e3
        row["cold_ms"] += cold * 1e3
        total["warm"] += warm
        total["cold"] += cold
    top = dict(sorted(by_kind.items(), key=lambda kv: -kv[1]["cold_ms"])[:10])
    print(json.dumps({"model": name, "dtype": dtype, "budget": budget, "recomputed_ops": len(again),
                      "predicted_ms": round(planned.prediction.recompute_cost * 1e3, 3),
                      "warm_ms": round(total["warm"] * 1e3, 3), "cold_ms": round(total["cold"] * 1e3, 3),
                      "kinds": {k: {kk: round(vv, 3) for kk, vv in v.items()} for k, v in top.items()}}), flush=True)


if __name__ == "__main__":
    main()
