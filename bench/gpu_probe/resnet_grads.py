"""Where remat's ResNet-152 gradients differ from eager on CUDA: per parameter, against AOTAutograd's
own default partition (torch.compile backend aot_eager) as the yardstick of tracing vs eager."""
import copy, sys, torch
sys.path.insert(0, "src")
import remat, torchvision
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
m = torchvision.models.resnet152().cuda().train()
x = torch.randn(8, 3, 224, 224, device="cuda"); y = torch.randint(0, 1000, (8,), device="cuda")
refs = {k: copy.deepcopy(m) for k in ("eager", "aot_eager")}
mods = {"eager": refs["eager"], "aot_eager": torch.compile(refs["aot_eager"], backend="aot_eager"),
        "remat100": remat.optimize(m, (x,), "100%", verify=False),
        }
grads = {}
for k, mod in mods.items():
    torch.nn.functional.cross_entropy(mod(x), y).backward()
    base = mod.module if k == "remat100" else (refs[k])
    grads[k] = {n: p.grad.detach().clone() for n, p in base.named_parameters()}
for k in ("aot_eager", "remat100"):
    diffs = sorted(((( grads[k][n] - g).abs().max() / g.abs().max()).item(), n, g.abs().max().item()) for n, g in grads["eager"].items())[-4:]
    print(k, "worst params vs eager:", diffs, flush=True)
    print(k, "max |dg| / max|g| over all:", max((grads[k][n] - g).abs().max().item() for n, g in grads["eager"].items()) / max(g.abs().max().item() for g in grads["eager"].values()))
