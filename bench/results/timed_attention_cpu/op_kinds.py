"""Per op kind: the roofline's seconds (``costs.node_costs(..., "roofline")``) against ``cost="profile"``'s over every
forward op of a CPU-size held-out model's joint graph (one thread), the top eight kinds by profiled time.
argv: models (comma list)."""
import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))
import remat  # noqa: E402
from remat.bench import heldout  # noqa: E402
from remat.compiled import costs  # noqa: E402

torch.set_num_threads(1)
for name in sys.argv[1].split(","):
    held = heldout.build(name, "cpu", "cpu")
    for dtype in ("fp32", "bf16"):
        with heldout.autocast("cpu", torch.bfloat16 if dtype == "bf16" else None):
            mod = remat.optimize(held.model, held.inputs, "100%", verify=False)
        joint = mod.step.planned.joint
        nodes = [joint.node_of[v] for v in joint.graph.order if joint.node_of.get(v) is not None]
        prof, roof = costs.profile(nodes), costs.node_costs(nodes, "roofline")
        by = collections.defaultdict(lambda: [0, 0.0, 0.0])
        for n in nodes:
            row = by[n.target.overloadpacket.__name__ if hasattr(n.target, "overloadpacket") else str(n.target)]
            row[0], row[1], row[2] = row[0] + 1, row[1] + roof[n], row[2] + prof[n]
        print(f"== {name} {dtype}: roofline {sum(roof.values()) * 1e3:.2f} ms, profile {sum(prof.values()) * 1e3:.2f} ms")
        for k, (c, r, p) in sorted(by.items(), key=lambda t: -t[1][2])[:8]:
            print(f"   {k:44s} {c:4d} roofline {r * 1e3:7.3f} ms  profile {p * 1e3:7.3f} ms  x{p / max(r, 1e-12):.2f}")
