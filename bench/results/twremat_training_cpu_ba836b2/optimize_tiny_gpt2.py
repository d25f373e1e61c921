import copy, torch, transformers, remat
torch.manual_seed(0)
cfg = transformers.GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=4096)
model = transformers.GPT2LMHeadModel(cfg).train()
ids = torch.randint(0, 4096, (4, 128))
inputs = {"input_ids": ids, "labels": ids}
for budget in ("70%", "50%"):
    ref = copy.deepcopy(model)
    m = remat.optimize(copy.deepcopy(model), inputs, budget, solver="twremat")
    r = m.report
    torch.manual_seed(1); m(**inputs).loss.backward()
    torch.manual_seed(1); ref(**inputs).loss.backward()
    same = all(torch.equal(p.grad, q.grad) for p, q in zip(m.parameters(), ref.parameters()) if q.grad is not None)
    print(budget, "measured", r["measured_peak"], "predicted", r["predicted_peak"], "recompute", r.get("recompute_fraction"),
          "grads equal", same, flush=True)
