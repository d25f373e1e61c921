"""HF EfficientNet (the sweep's config) with its dropout set to 0: eager twice, an fp64 step, and remat.backend
with fx codegen (second step) at a budget; prints the largest gradients and the differences.
Run: OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python THIS_FILE 50% nodrop"""
import copy, sys, torch, remat
from torch import nn
from remat.bench import architectures as A
from remat.bench.heldout import raise_dynamo_limits, grad_difference
raise_dynamo_limits()
model, inputs, _ = A.build("efficientnet")
drop = sys.argv[2] == "nodrop"
if drop:
    for m in model.modules():
        if isinstance(m, nn.Dropout): m.p = 0.0
names = [n for n, _ in model.named_parameters()]
ref = copy.deepcopy(model); l = A._step(ref, inputs, "fp32")
ref2 = copy.deepcopy(model); l2 = A._step(ref2, inputs, "fp32")
print("loss", l.item(), l2.item(), "eager-eager", grad_difference([p.grad for p in ref2.parameters()], [p.grad for p in ref.parameters()]))
for n, p in zip(names, ref.parameters()):
    if n.endswith(("top_bn.bias", "classifier.weight", "top_conv.weight")) or "blocks.15.projection.project_bn.bias" in n:
        print(n, "eager max", p.grad.abs().max().item())
if drop:
    t = A._fp64_grads(model, inputs)
    for n, g in zip(names, t):
        if n.endswith(("top_bn.bias", "classifier.weight", "top_conv.weight")): print(n, "fp64 max", g.abs().max().item())
ours = copy.deepcopy(model)
net = torch.compile(ours, backend=remat.backend(budget=sys.argv[1], compiler="eager"))
A._step(net, inputs, "fp32"); ours.zero_grad(set_to_none=True); A._step(net, inputs, "fp32")
for n, p in zip(names, ours.parameters()):
    if n.endswith(("top_bn.bias", "classifier.weight", "top_conv.weight")): print(n, "remat fx max", p.grad.abs().max().item())
print("remat fx - eager", grad_difference([p.grad for p in ours.parameters()], [p.grad for p in ref.parameters()]))
