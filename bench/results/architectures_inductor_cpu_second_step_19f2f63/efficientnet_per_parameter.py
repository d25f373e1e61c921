"""Run: OMP_NUM_THREADS=1 TORCHINDUCTOR_FX_GRAPH_CACHE=0 PYTHONPATH=src .venv/bin/python THIS_FILE (writes /tmp/w/effn_rng.json).
HF EfficientNet fp32 as in the sweep (dropout on): remat inductor at half the vanilla peak, gradients of the
second step of a fresh compile under eager's generator, per parameter against eager's step from the same seed."""
import copy, json, torch, remat
from remat.bench import architectures as A
from remat.bench.heldout import raise_dynamo_limits, grad_difference, GRAD_FLOOR, second_step_grads
raise_dynamo_limits()
model, inputs, _ = A.build("efficientnet")
def peak(net):
    from remat.measure import measure
    return float(measure(net, inputs, method="profiler", loss_fn=lambda out: out.loss).peak)
van = peak(copy.deepcopy(model))
ref = copy.deepcopy(model); A._step(ref, inputs, "fp32")
eager = [p.grad for p in ref.parameters()]
made = []
def make():
    base = copy.deepcopy(model); made.append(remat.backend(budget=int(0.5 * van), compiler="inductor"))
    return torch.compile(base, backend=made[-1]), base
torch._dynamo.reset()
ours = second_step_grads(make, lambda net: A._step(net, inputs, "fp32"))
print("provisional", [r["provisional"] for r in made[0].report], "diff", grad_difference(ours, eager), flush=True)
big = max(g.abs().max().item() for g in eager if g is not None)
out = []
for (n, _), e, r in zip(model.named_parameters(), eager, ours):
    s = max(e.abs().max().item(), GRAD_FLOOR * big)
    out.append(dict(name=n, eager_max=e.abs().max().item(), remat_max=r.abs().max().item(),
                    abs_diff=(r - e).abs().max().item(), rel=(r - e).abs().max().item() / s))
out.sort(key=lambda x: -x["rel"])
for x in out[:4]: print(x)
own = [x for x in out if x["eager_max"] > GRAD_FLOOR * big]
print("largest eager grad", big, "worst among parameters with a gradient above the floor", max(x["rel"] for x in own))
json.dump(out, open("/tmp/w/effn_rng.json", "w"), indent=1)
