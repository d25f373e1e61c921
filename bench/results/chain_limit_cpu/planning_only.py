"""Planning only, no step run: `selective` on captured graphs (eager, FLOP costs, the op-by-op simulation) with
no chain limit, 4 and 16: its floor, and at 90-40% of the vanilla peak whether it fits and what it recomputes
(fraction of a forward)."""
import sys, time, torch
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]
torch.set_num_threads(1)
import remat
from remat import schedule, simulate
from remat.solvers import selective
from remat.bench import heldout
from remat.graph import Graph
def graphs():
    from bench_cnn_planning import build
    model, inputs, labels = build([3, 8, 36, 3], 2, 224)
    yield "resnet152", remat.capture(model, {**inputs, "labels": labels}, cost="flops")
    for name in ("llama", "gpt2", "vit", "resnet"):
        h = heldout.build(name, "cpu", "cpu")
        yield name, remat.capture(h.model, {**h.inputs, "labels": h.labels}, cost="flops")
for name, g in graphs():
    van = simulate(g, schedule.vanilla(g)).peak
    total = sum(g[v].cost for v in g.order)
    print(name, len(g), "vanilla", van, flush=True)
    for L in (None, 4, 16):
        t = time.perf_counter(); low = selective.lowest(g, chain_limit=L).peak
        print(f"  limit {L}: floor {low / van:.3f} ({time.perf_counter() - t:.1f}s)", flush=True)
    for frac in (0.9, 0.7, 0.5, 0.4):
        row = []
        for L in (None, 4, 16):
            p = selective.solve(g, frac * van, chain_limit=L)
            row.append(f"L{L}: {'ok' if p.feasible else 'NO'} {p.recompute_cost / total:.3f}")
        print(f"  {frac:.0%}: " + " | ".join(row), flush=True)
