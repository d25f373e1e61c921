"""A GPT-2-style model trained on a small text (Shakespeare's sonnets, shipped in data/) with
DDP on 2 CPU processes, bf16 autocast, remat at a 40% activation budget and a plan cache.

    python examples/train_gpt2_ddp.py                # 300 steps with remat
    python examples/train_gpt2_ddp.py --no-remat     # the same script without remat
    python examples/train_gpt2_ddp.py --compare      # both, and whether their loss curves are equal

What remat changes in the training script is one line (``remat.optimize``, marked below): the
loop, DDP, autocast and the optimizer are untouched. Rank 0 plans (its vanilla step measured,
the plan verified on a real step) and stores the plan in the plan cache; the other ranks, and
any later run, load it from there without planning. The planned step recomputes activations
instead of keeping them and gives the same gradients as the plain step, bit for bit, dropout and
bf16 included, so the loss curves are equal.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = Path(__file__).resolve().parent
TEXT = HERE / "data" / "sonnets.txt"


# ---- the model: GPT-2's architecture, small -----------------------------------------------------

class Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(dropout)
        self.p = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, dim: int = 64, layers: int = 6, heads: int = 4,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as GPT-2's
        for name, w in self.named_parameters():  # GPT-2's initialisation
            if name.endswith("bias"):
                nn.init.zeros_(w)
            elif w.dim() > 1:
                nn.init.normal_(w, std=0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight"))
                                else 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


# ---- data: characters of the text, random windows, one stream per rank ----------------------------

def load_text() -> tuple[torch.Tensor, int]:
    text = TEXT.read_text()
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    return ids, len(chars)


def batches(ids: torch.Tensor, rank: int, steps: int, batch: int, seq: int, seed: int):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    for _ in range(steps):
        start = torch.randint(0, len(ids) - seq - 1, (batch,), generator=g)
        x = torch.stack([ids[s:s + seq] for s in start.tolist()])
        y = torch.stack([ids[s + 1:s + seq + 1] for s in start.tolist()])
        yield x, y


# ---- one rank -----------------------------------------------------------------------------------

def worker(rank: int, world: int, init: str, args: argparse.Namespace, variants: list[str], out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.set_num_threads(args.threads)
    results = {name: train_one(rank, world, args, use_remat=name == "remat") for name in variants}
    if rank == 0:
        Path(out).write_text(json.dumps(results))
    dist.destroy_process_group()


def train_one(rank: int, world: int, args: argparse.Namespace, use_remat: bool) -> dict:
    """The training script proper: model, data, DDP, bf16 autocast, AdamW; remat if asked."""
    ids, vocab = load_text()
    torch.manual_seed(args.seed)
    model = GPT(vocab, args.seq, dim=args.dim, layers=args.layers)
    data = list(batches(ids, rank, args.steps, args.batch, args.seq, args.seed))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    if rank == 0:
        print(f"== {'remat at ' + args.budget if use_remat else 'plain'} ==", flush=True)

    step_module: nn.Module = model
    if use_remat:
        import remat

        # the one line remat adds (under autocast: the bf16 step is the one planned). Rank 0 plans
        # and stores the plan; the other ranks then load it from the plan cache
        for turn in (0, 1):
            if (rank == 0) == (turn == 0):
                with autocast:
                    step_module = remat.optimize(model, data[0], args.budget, plan_cache=args.plan_cache)
            dist.barrier()
        if rank == 0:
            print(step_module.report, flush=True)
            print(f"  plan cache: {step_module.report.extra.get('plan_cache')}", flush=True)

    ddp = DDP(step_module)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses = []
    started = time.perf_counter()
    for step, (x, y) in enumerate(data):
        with autocast:
            loss = ddp(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
        if rank == 0 and (step % args.log_every == 0 or step == args.steps - 1):
            print(f"step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    return {"losses": losses, "seconds": time.perf_counter() - started}


def train(args: argparse.Namespace, variants: list[str]) -> dict:
    """Spawn ``args.world`` ranks, train each variant ("remat", "plain") in turn, return rank 0's
    loss curves."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "losses.json")
        mp.spawn(worker, args=(args.world, "file://" + os.path.join(d, "rendezvous"), args, variants, out),
                 nprocs=args.world, join=True)
        return json.loads(Path(out).read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--budget", default="40%", help="remat's activation budget (default 40%% of the vanilla peak)")
    p.add_argument("--plan-cache", default=os.path.join(tempfile.gettempdir(), "remat-example-plans"))
    p.add_argument("--no-remat", dest="remat", action="store_false", help="the same script without remat")
    p.add_argument("--compare", action="store_true", help="train with and without remat, compare the loss curves")
    p.add_argument("--world", type=int, default=2, help="DDP processes (CPU, gloo)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--batch", type=int, default=4, help="sequences per rank and step")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=25)
    args = p.parse_args(argv)
    if not args.compare:
        name = "remat" if args.remat else "plain"
        result = train(args, [name])[name]
        print(f"{name}: {args.steps} steps in {result['seconds']:.1f} s, final loss {result['losses'][-1]:.4f}")
        return 0
    curves = train(args, ["remat", "plain"])
    a, b = curves["remat"]["losses"], curves["plain"]["losses"]
    print(f"\n{'step':>5}  {'remat':>10}  {'plain':>10}")
    for i in sorted({*range(0, len(a), args.log_every), len(a) - 1}):
        print(f"{i:5d}  {a[i]:10.6f}  {b[i]:10.6f}")
    equal = a == b
    worst = max((abs(x - y) for x, y in zip(a, b)), default=math.nan)
    print(f"loss curves equal: {equal} ({len(a)} steps, largest difference {worst:.3g}); "
          f"time {curves['remat']['seconds']:.1f} s with remat, {curves['plain']['seconds']:.1f} s without")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
