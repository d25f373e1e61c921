"""CPU A/B in one process: remat inductor's code with horizontal fusion adjacent-only (3dd9cdf) against inductor's
own under the guard (25f87d8), held-out models (CPU sizes, bf16), at torch.compile b=1's peak and at 50%."""
import contextlib, os, statistics, sys, time
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0"); os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
import torch
torch.set_num_threads(1)
sys.path.insert(0, "src"); sys.path.insert(0, "bench/gpu_probe")
os.environ["DEVICE"] = "cpu"
import remat
from remat.bench import heldout
from remat.compiled import fusion
from overhead import interleaved

_new = fusion._choices

def _old(guard=None):
    c = _new(guard)
    base = type(c).__mro__[1]
    def can_fuse_horizontal(scheduler, node1, node2, shared):
        apart = max(abs(node1.min_order - node2.max_order), abs(node2.min_order - node1.max_order))
        return apart <= 1 and base.can_fuse_horizontal(scheduler, node1, node2, shared)
    type(c).can_fuse_horizontal = staticmethod(can_fuse_horizontal)
    return c

@contextlib.contextmanager
def adjacent():
    fusion._choices = _old
    try:
        yield
    finally:
        fusion._choices = _new

heldout.raise_dynamo_limits()
for name in sys.argv[1].split(","):
    held = heldout.build(name, "cpu", "cpu")
    params = [p for p in held.model.parameters() if p.requires_grad]
    steps, peaks = {}, {}
    def add(label, net, ctx=contextlib.nullcontext):
        task = heldout.Task(net, held.kind, held.labels, torch.bfloat16, "cpu")
        def step():
            task(**held.inputs).backward()
            torch._foreach_zero_([p.grad for p in params if p.grad is not None])
        with ctx():
            step()
        step()
        peaks[label] = remat.measure(step, method="profiler", warmup=0).peak
        steps[label] = step
    add("compile b=1", heldout.Compiled(held.model, "inductor", 1.0, f"ab_c_{name}"))
    at = int(peaks["compile b=1"])
    for budget, tag in ((at, "@b=1"), ("50%", "50%")):
        for ctx, how in ((adjacent, "adjacent"), (contextlib.nullcontext, "inductor's")):
            be = remat.backend(budget=budget, solver="auto", compiler="inductor")
            add(f"{tag} {how}", heldout.Compiled(held.model, be, None, f"ab_{name}_{tag}_{how}"), ctx)
    times = interleaved(steps, 15, lambda: None)
    base = statistics.median(times["compile b=1"])
    for label in steps:
        print(f"[{name}] {label:22s} peak {peaks[label]:>10.0f}  step {statistics.median(times[label]):7.2f} ms "
              f"x{statistics.median(times[label]) / base:.3f}", flush=True)
