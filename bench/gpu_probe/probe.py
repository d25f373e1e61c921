"""GPU smoke of the compiled runtime: torch version compatibility, exactness on CUDA (fp32, bf16
autocast, dropout, BatchNorm), both backend compilers. Prints one line per check."""
import copy, sys, time, traceback
import torch
from torch import nn
sys.path.insert(0, "src")
print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
for mod, names in [("torch._functorch.partitioners", ["_extract_fwd_bwd_outputs", "_extract_graph_with_inputs_outputs"]),
                   ("torch._functorch._aot_autograd.descriptors", ["SavedForBackwardsAOTOutput"]),
                   ("torch.fx._lazy_graph_module", ["_make_graph_module"]),
                   ("torch._inductor.custom_graph_pass", ["CustomPartitionerFn"]),
                   ("torch.compiler", ["_compile_session_context"])]:
    try:
        m = __import__(mod, fromlist=names)
        print(mod, {n: hasattr(m, n) for n in names}, flush=True)
    except Exception as e:
        print(mod, "IMPORT FAILED", e, flush=True)
import inspect
from torch._functorch import partitioners
print(inspect.signature(partitioners._extract_graph_with_inputs_outputs), flush=True)
import remat
dev = "cuda"
def mk():
    torch.manual_seed(0)
    layers = [nn.Linear(64, 256)]
    for _ in range(6):
        layers += [nn.LayerNorm(256), nn.GELU(), nn.Dropout(0.1), nn.Linear(256, 256)]
    return nn.Sequential(*layers, nn.Linear(256, 8)).to(dev)
def cnn():
    torch.manual_seed(0)
    b = [nn.Conv2d(3, 16, 3, padding=1)]
    for _ in range(4): b += [nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1)]
    return nn.Sequential(*b, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4)).to(dev)
for name, build, x in [("mlp", mk, torch.randn(128, 64, device=dev)), ("cnn", cnn, torch.randn(8, 3, 32, 32, device=dev))]:
    for ac in (False, True):
        try:
            m = build(); ref = copy.deepcopy(m)
            ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if ac else (lambda: torch.autocast("cuda", enabled=False))
            t = time.time()
            with ctx():
                mod = remat.optimize(m, (x,), "60%", solver="chen-greedy")
            torch.manual_seed(1)
            with ctx(): l = mod(x).float().sum()
            l.backward()
            torch.manual_seed(1)
            with ctx(): l2 = ref(x).float().sum()
            l2.backward()
            d = max(((p.grad - q.grad).abs().max() / q.grad.abs().max()).item() for p, q in zip(m.parameters(), ref.parameters()))
            r = mod.report
            print(name, "bf16" if ac else "fp32", "equal", all(torch.equal(p.grad, q.grad) for p, q in zip(m.parameters(), ref.parameters())),
                  "maxrel", d, "pred", r["predicted_peak"], "meas", r["measured_peak"], "van", r["vanilla_measured_peak"], f"{time.time()-t:.1f}s", flush=True)
        except Exception:
            traceback.print_exc()
from remat.compiled.module import _compiling
with _compiling():
    print("is_compiling inside remat trace:", torch.compiler.is_compiling(), flush=True)
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
for mname, mk2 in [("gpt2", lambda: GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=512))),
                   ("llama", lambda: LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, vocab_size=512)))]:
    for ac in (False, True):
        try:
            torch.manual_seed(0)
            m = mk2().to(dev).train(); ref = copy.deepcopy(m)
            ids = torch.randint(0, 512, (2, 64), device=dev)
            ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if ac else (lambda: torch.autocast("cuda", enabled=False))
            with ctx():
                mod = remat.optimize(m, {"input_ids": ids, "labels": ids}, "70%", solver="chen-greedy")
            torch.manual_seed(1)
            with ctx(): l = mod(input_ids=ids, labels=ids).loss
            l.backward()
            torch.manual_seed(1)
            with ctx(): l2 = ref(input_ids=ids, labels=ids).loss
            l2.backward()
            d = max(((p.grad - q.grad).abs().max() / q.grad.abs().max()).item() for p, q in zip(m.parameters(), ref.parameters()))
            r = mod.report
            print(mname, "bf16" if ac else "fp32", "equal", all(torch.equal(p.grad, q.grad) for p, q in zip(m.parameters(), ref.parameters())),
                  "maxrel", d, "pred", r["predicted_peak"], "meas", r["measured_peak"], "van", r["vanilla_measured_peak"], flush=True)
        except Exception:
            traceback.print_exc()
for comp in ():
    try:
        torch._dynamo.reset()
        m = mk(); ref = copy.deepcopy(m); m.eval(); ref.eval()  # no dropout: compiled code draws its own
        m.train(); ref.train()
        for mm in (m, ref):
            for s in mm.modules():
                if isinstance(s, nn.Dropout): s.p = 0.0
        be = remat.backend(budget="60%", solver="chen-greedy", compiler=comp)
        c = torch.compile(m, backend=be)
        x = torch.randn(128, 64, device=dev)
        c(x).sum().backward(); ref(x).sum().backward()
        d = max(((p.grad - q.grad).abs().max() / q.grad.abs().max()).item() for p, q in zip(m.parameters(), ref.parameters()))
        print("backend", comp, be.report, "maxrel", d, flush=True)
    except Exception:
        traceback.print_exc()
