"""LeViT bf16 at the bench's inputs: per parameter, remat inductor ("50%" as bytes, its second step) / torch.compile / eager
against an fp64 eager step. Run: OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python THIS_FILE (writes /tmp/w/levitbf.json)."""
import copy, json, torch, remat
from remat.bench import architectures as A
from remat.bench.heldout import raise_dynamo_limits, GRAD_FLOOR
raise_dynamo_limits()
model, inputs, _ = A.build("levit")
dtype = "bf16"
def grads(m): return [p.grad for p in m.parameters()]
def peak(net):
    from remat.measure import measure
    with A._autocast(dtype):
        return float(measure(net, inputs, method="profiler", loss_fn=lambda out: out.loss).peak)
van = peak(copy.deepcopy(model))
ref = copy.deepcopy(model); A._step(ref, inputs, dtype)
d = copy.deepcopy(model).double()
A._step(d, {k: (v.double() if v.is_floating_point() else v) for k, v in inputs.items()}, "fp32")
ours = copy.deepcopy(model)
be = remat.backend(budget=int(0.5 * van), compiler="inductor")
net = torch.compile(ours, backend=be); A._step(net, inputs, dtype)
ours.zero_grad(set_to_none=True); A._step(net, inputs, dtype)
torch._dynamo.reset()
peer = copy.deepcopy(model); A._step(torch.compile(peer), inputs, dtype); torch._dynamo.reset()
big = max(g.abs().max().item() for g in grads(ref) if g is not None)
out = []
for (n, _), t, e, r, p in zip(model.named_parameters(), grads(d), grads(ref), grads(ours), grads(peer)):
    if e is None: continue
    s = max(e.abs().max().item(), GRAD_FLOOR * big)
    f = lambda a, b: (a.double() - b.double()).abs().max().item() / s
    out.append(dict(name=n, eager_scale=e.abs().max().item(), true_scale=t.abs().max().item(),
                    remat_vs_eager=f(r, e), compile_vs_eager=f(p, e), eager_vs_true=f(e, t),
                    remat_vs_true=f(r, t), compile_vs_true=f(p, t)))
out.sort(key=lambda x: -x["remat_vs_eager"])
json.dump(out, open("/tmp/w/levitbf.json", "w"), indent=1)
for x in out[:8]: print(x)
print("largest eager grad", big, [r.get("chosen") for r in be.report])
