"""Training batch norm's output recomputed from its saved statistics, not by a second batch norm.

A training-mode batch norm computes its batch mean and inverse standard deviation (a reduction
over the whole input) and then normalizes: ``out = x * alpha + beta`` per channel, with
``alpha = invstd * weight`` and ``beta = bias - mean * alpha``. Its backward keeps the statistics
anyway (a few bytes per channel), so a plan that drops ``out`` (ResNet's conv -> BN -> ReLU: keep
the convolution's output, recompute the rest) only needs the second half again. Recomputing the
whole op repeats the reduction: on this project's CPU an fp32 batch norm takes 970 us where the
normalization alone takes 250 us (8 x 64 x 32 x 32).

``jointgraph.build`` makes such a batch norm two planning nodes: its statistics (always kept,
``pinned``) and its output, whose recomputation is ``apply_statistics``. The forward still runs
the one fused kernel. The normalization is written as the CPU kernel computes it (fused
multiply-adds, the input's layout), and a plan uses it only where it reproduces the kernel's
output bit for bit on the model's device, dtypes, shape and strides (``exact``: checked once per
case on random values), so gradients stay eager's. Mixed dtypes (a bf16 input under autocast,
fp32 parameters) are left whole on the CPU, where their normalization alone is slower than the
fused kernel (650 against 230 us).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

BN_FUNCTIONAL = torch.ops.aten._native_batch_norm_legit_functional.default
OUTPUT_SUFFIX = "_normalized"  # planning id of a split batch norm's output: f"{bn}{OUTPUT_SUFFIX}"


def apply_statistics(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                     mean: torch.Tensor, invstd: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """Batch norm's output from its batch statistics, in ``stride``'s layout: per channel
    ``x * alpha + beta`` as fused multiply-adds (``addcmul``), as the CPU kernel computes it."""
    alpha = invstd * weight if weight is not None else invstd
    beta = torch.addcmul(bias, mean, alpha, value=-1) if bias is not None else torch.mul(mean, alpha).neg_()
    shape = [1, -1] + [1] * (x.dim() - 2)
    out = torch.empty_strided(x.shape, stride, dtype=x.dtype, device=x.device)
    return torch.addcmul(beta.view(shape), x, alpha.view(shape), out=out)


def _val(a: Any) -> torch.Tensor | None:
    v = a.meta.get("val") if isinstance(a, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def outputs(n: fx.Node) -> dict[int, fx.Node]:
    """``n``'s ``getitem`` users by output index."""
    return {u.args[1]: u for u in n.users if u.target is operator.getitem}


def splittable(n: fx.Node, is_forward: Any) -> bool:
    """A training batch norm of the joint graph whose output can be recomputed from its saved
    statistics: the statistics (outputs 1 and 2) exist and no forward op reads them, the shapes
    are static, and ``apply_statistics`` reproduces the kernel here (``exact``)."""
    if n.target is not BN_FUNCTIONAL or len(n.args) < 8 or n.args[5] is not True:
        return False
    got = outputs(n)
    if 0 not in got or 1 not in got or 2 not in got:
        return False
    if any(is_forward(u) for k in (1, 2) for u in got[k].users):
        return False
    x, w, b = (_val(a) for a in n.args[:3])
    out = _val(got[0])
    if x is None or out is None or x.dim() < 2 or (n.args[1] is not None and w is None) or \
            (n.args[2] is not None and b is None):
        return False
    if not all(isinstance(s, int) for s in (*x.shape, *x.stride(), *out.stride())):
        return False
    return exact(x, w, b, tuple(out.stride()))


_exact: dict[tuple, bool] = {}


def exact(x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None, stride: tuple[int, ...]) -> bool:
    """Whether ``apply_statistics`` gives the fused kernel's output, bit for bit and in its layout,
    for tensors like these (fake or real) on their device: run once per case on random values."""
    from .costs import device_name, real_mode

    device = x.device
    params = w if w is not None else b
    mixed = params is not None and params.dtype != x.dtype
    key = (device_name(device), tuple(x.shape), tuple(x.stride()), x.dtype, None if w is None else w.dtype,
           None if b is None else b.dtype, stride)
    if key in _exact:
        return _exact[key]
    if device.type == "meta" or (mixed and device.type == "cpu"):
        _exact[key] = False
        return False
    try:
        with real_mode(), torch.no_grad():
            gen = torch.Generator(device=device).manual_seed(0)
            real = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=device)
            real.copy_(torch.randn(x.shape, generator=gen, device=device) * 3 + 1)
            rw = None if w is None else torch.randn(w.shape, generator=gen, device=device).to(w.dtype)
            rb = None if b is None else torch.randn(b.shape, generator=gen, device=device).to(b.dtype)
            out, mean, invstd = torch.ops.aten._native_batch_norm_legit.no_stats(real, rw, rb, True, 0.1, 1e-5)
            again = apply_statistics(real, rw, rb, mean, invstd, stride)
            ok = bool(torch.equal(again, out)) and again.stride() == out.stride() == stride
    except Exception:  # noqa: BLE001 - a case the normalization cannot run: recompute the whole op
        ok = False
    _exact[key] = ok
    return ok


def reads(n: fx.Node) -> list[fx.Node]:
    """The joint-graph values ``apply_statistics`` reads for ``n``: input, weight, bias, mean, inverse std."""
    got = outputs(n)
    return [a for a in (*n.args[:3], got[1], got[2]) if isinstance(a, fx.Node)]


def call(g: fx.Graph, n: fx.Node, value: Any) -> fx.Node:
    """Emit ``apply_statistics`` for ``n`` into ``g``, its arguments mapped by ``value``."""
    got = outputs(n)
    args = [value(a) if isinstance(a, fx.Node) else a for a in (*n.args[:3], got[1], got[2])]
    new = g.call_function(apply_statistics, (*args, tuple(got[0].meta["val"].stride())))
    new.meta = dict(got[0].meta)
    return new


def apply_cost(n: fx.Node, cost: str, device: Any = None) -> float:
    """What recomputing ``n``'s output from its statistics costs in the ``cost`` model: one pass
    reading the input and writing the output (the fused op also reads its input for the statistics;
    ``costs.bytes_moved``); under ``"roofline"`` and ``"profile"`` timed on the device where the graph's
    values are on one (``costs.TIMED``)."""
    from . import costs

    x, out = n.args[0].meta["val"], outputs(n)[0].meta["val"]
    if cost == "paper":
        return costs.paper(n)
    if cost == "flops":
        return float(out.numel())
    moved = float(x.numel() * x.element_size() + out.numel() * out.element_size())
    if cost in ("profile", "roofline") and x.device.type != "meta":  # timed, as the roofline times batch norms
        key = f"apply_statistics:{costs.op_key(n)}"
        cache = costs.Cache(x.device)
        if key not in cache.ops:
            got = outputs(n)
            with costs.real_mode(), torch.no_grad():
                args = [costs._real(a.meta.get("val"), x.device) if isinstance(a, fx.Node) else a
                        for a in (*n.args[:3], got[1], got[2])]
                cache.put(key, costs._op_seconds(
                    lambda: apply_statistics(*args, tuple(out.stride())), x.device))
            cache.save()
        return cache.ops[key]
    fig = costs.device_figures(device if device is not None else x.device)
    return costs.seconds(fig, out.numel(), moved, x.dtype == torch.float32)


BN_IN_PLACE = torch.ops.aten._native_batch_norm_legit.default
_COPY = torch.ops.aten.copy_.default
_ADD, _ADD_IN_PLACE = torch.ops.aten.add.Tensor, torch.ops.aten.add_.Tensor


def update_statistics_in_place(gm: fx.GraphModule) -> int:
    """Each training batch norm of a forward graph whose running statistics are graph inputs read
    by it alone updates them in place, as eager's kernel does, instead of updating clones that are
    then copied in: by AOTAutograd's epilogue (two clones and two copies a batch norm: on the CPU
    ResNet of the benchmark its no-recompute step measured 1.025x eager's against 1.033x, 40
    interleaved rounds; the new statistics returned are then the inputs themselves, copied onto
    themselves), or, with ``keep_inference_input_mutations``, by ``copy_`` ops in the graph, which
    are removed. Same kernel, same values. Returns the ops rewritten (``_count_in_place``'s too)."""
    done = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not BN_FUNCTIONAL or len(n.args) < 8 or n.args[5] is not True:
            continue
        rm, rv = n.args[3], n.args[4]
        got = outputs(n)
        if len(got) != sum(1 for _ in n.users):  # a reader of the whole tuple
            continue
        copies = [c for k, a in ((3, rm), (4, rv)) if isinstance(a, fx.Node) for c in a.users
                  if c.target is _COPY and c.args[0] is a and k in got and c.args[1] is got[k]]
        if not all(isinstance(a, fx.Node) and a.op == "placeholder" and set(a.users) <= {n, *copies}
                   for a in (rm, rv)):
            continue
        for c in copies:
            gm.graph.erase_node(c)
        with gm.graph.inserting_before(n):
            new = gm.graph.call_function(BN_IN_PLACE, n.args[:8])
        val = n.meta.get("val")
        new.meta = {**n.meta, "val": tuple(val[:3]) if isinstance(val, (tuple, list)) else val}
        for k, g in got.items():
            if k >= 3:
                g.replace_all_uses_with(rm if k == 3 else rv)
                gm.graph.erase_node(g)
            else:
                g.args = (new, k)
        gm.graph.erase_node(n)
        done += 1
    done += _count_in_place(gm)
    if done:
        gm.recompile()
    return done


def _count_in_place(gm: fx.GraphModule) -> int:
    """``copy_(x, add(x, 1))`` on a graph input read by nothing else (a batch norm's
    ``num_batches_tracked``, kept in the graph by ``keep_inference_input_mutations``) becomes
    ``add_(x, 1)`` where the add was, as eager increments it: one op, and no new tensor."""
    done = 0
    for c in list(gm.graph.find_nodes(op="call_function", target=_COPY)):
        x, new = c.args[0], c.args[1]
        if not (isinstance(x, fx.Node) and x.op == "placeholder" and isinstance(new, fx.Node)
                and new.target is _ADD and new.args[0] is x and set(x.users) == {new, c} and set(new.users) == {c}):
            continue
        with gm.graph.inserting_before(new):
            inc = gm.graph.call_function(_ADD_IN_PLACE, new.args, dict(new.kwargs))
        inc.meta = {**new.meta, "val": x.meta.get("val")}
        gm.graph.erase_node(c)
        gm.graph.erase_node(new)
        done += 1
    return done


_WITH_STATISTICS = ("_native_batch_norm_legit_functional", "_native_batch_norm_legit", "native_batch_norm",
                    "_native_batch_norm_legit_no_stats")


def real_statistics(gm: fx.GraphModule) -> int:
    """Give the batch statistics of mixed-dtype CPU batch norms the dtype the kernel returns them
    in; the number of batch norms changed. Under autocast a batch norm reads a bf16 input with
    fp32 parameters; the CPU kernel returns its mean and inverse standard deviation in fp32, where
    the fake (meta) kernel says bf16. Both are saved for the backward: the walk of the code and the
    planning graph counted half their bytes (7,744 bytes over a small ResNet's 29 batch norms,
    which put plans using their budget to the byte just over it)."""
    changed = 0
    for n in gm.graph.nodes:
        packet = getattr(n.target, "overloadpacket", None)
        if n.op != "call_function" or packet is None or packet.__name__ not in _WITH_STATISTICS:
            continue
        x = _val(n.args[0])
        params = [_val(a) for a in n.args[1:5] if _val(a) is not None]
        if x is None or x.device.type != "cpu" or x.dtype not in (torch.bfloat16, torch.float16) \
                or not any(p.dtype == torch.float32 for p in params):
            continue
        val = n.meta.get("val")
        if not isinstance(val, (tuple, list)) or len(val) < 3:
            continue
        fixed = list(val)
        for j in (1, 2):
            t = fixed[j]
            if isinstance(t, torch.Tensor) and t.dtype != torch.float32:
                fixed[j] = t.new_empty(t.shape, dtype=torch.float32)
        if all(a is b for a, b in zip(fixed, val)):
            continue
        n.meta["val"] = type(val)(fixed)
        for j, u in outputs(n).items():
            if j in (1, 2):
                u.meta["val"] = fixed[j]
        changed += 1
    return changed
