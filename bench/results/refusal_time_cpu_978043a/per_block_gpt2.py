import copy, time, sys, torch, transformers, remat
from remat.measure import measure, training_step
torch.manual_seed(0)
cfg = transformers.GPT2Config()
model = transformers.GPT2LMHeadModel(cfg).train()
ids = torch.randint(0, cfg.vocab_size, (2, 128))
inputs = {"input_ids": ids, "labels": ids}
def peak(m): return measure(m, inputs, method="profiler").peak
v = peak(copy.deepcopy(model)); print("vanilla", v, flush=True)
ck = copy.deepcopy(model); ck.gradient_checkpointing_enable(); print("hf ckpt", peak(ck)/v, flush=True)
ck = copy.deepcopy(model); ck.gradient_checkpointing_enable({"use_reentrant": False}); print("hf ckpt nonreentrant", peak(ck)/v, flush=True)
for b in sys.argv[1:]:
    m = remat.optimize(copy.deepcopy(model), inputs, b, verify=False)
    print(b, "remat measured", peak(m)/v, "pred", m.report["predicted_peak"]/v, m.report.get("chosen"), flush=True)
