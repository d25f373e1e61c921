"""The generated eager backward returns each parameter's gradient laid out as the parameter.

Autograd's ``AccumulateGrad`` takes a returned gradient as ``.grad`` when its strides are its
parameter's, and otherwise copies it into the parameter's layout. A convolution reading a
channels-last input (ConvNeXt's downsampling layers, after the permutes around a layer norm)
returns its weight's gradient channels-last for a contiguous weight. Eager autograd copies each
as soon as it is made, so the channels-last one dies at once; AOTAutograd's backward returns every
gradient when it ends, so each such gradient lived through the rest of the backward and was
copied only then: an HF ConvNeXt V2's code held three of them (0.17 MB, 9% of its 1.96 MB step),
and its least plan measured 9% above per-block checkpointing's peak. Here the copy is made in the
backward right after the gradient, as eager makes it: the same values (a copy), the same bytes
at the same time.

Inductor's backward returns such gradients channels-last too, under its layout optimization: every
convolution weight's over 1x1 (``codepeak.returned_channels_last``). On the CPU-size HF ResNet
(bf16) they were 0.15 of the eager step's peak, all held at the end of the backward, and with them
no plan's channels-last code met half that peak, so it ran without the layout optimization, 10%
slower. For inductor's code (``fused_outputs``) the copy goes where the fused walk says the gradient comes
channels-last; it runs in a kernel of inductor's own (a gradient cast to fp32 is cast inside it).
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .codepeak import _breaks_layout_contract, _flat_outputs, inductor_restrided


def restrided(forward: fx.GraphModule, backward: fx.GraphModule) -> list[int]:
    """Positions of the gradients ``backward`` returns whose strides are not their parameter's
    (``forward``'s placeholder at the same position)."""
    primals = list(forward.graph.find_nodes(op="placeholder"))
    out = next(iter(backward.graph.find_nodes(op="output")))
    return [j for j, grad in enumerate(_flat_outputs(out))
            if isinstance(grad, fx.Node) and j < len(primals) and _breaks_layout_contract(grad, primals[j])]


def grads_as_parameters(forward: fx.GraphModule, backward: fx.GraphModule,
                        fused_outputs: int | None = None) -> int:
    """Copy each returned gradient whose strides are not its parameter's (``restrided``) into the
    parameter's memory format, right after it is made. ``fused_outputs``: the code is inductor's,
    and the forward returns this many outputs before its saved values (``inductor_restrided``).
    Returns the gradients copied."""
    primals = list(forward.graph.find_nodes(op="placeholder"))
    out = next(iter(backward.graph.find_nodes(op="output")))
    outs = _flat_outputs(out)
    done = 0
    which = (restrided(forward, backward) if fused_outputs is None
             else [j for j in inductor_restrided(forward, backward, fused_outputs) if j < len(primals)])
    for j in which:
        grad = outs[j]
        fmt = _memory_format(primals[j].meta["val"])
        if fmt is None:
            continue
        with backward.graph.inserting_after(grad):
            copy = backward.graph.call_function(torch.ops.aten.clone.default, (grad,), {"memory_format": fmt})
        copy.meta = {**grad.meta, "val": _like(grad.meta["val"], primals[j].meta["val"])}
        outs[j] = copy
        done += 1
    if done:
        out.args = (tuple(outs),)
        backward.recompile()
    return done


def _memory_format(param: torch.Tensor) -> torch.memory_format | None:
    """The memory format ``param`` is dense in: contiguous, or channels-last (4-D, 5-D); else None."""
    if param.is_contiguous():
        return torch.contiguous_format
    if param.dim() == 4 and param.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    if param.dim() == 5 and param.is_contiguous(memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return None


def _like(grad: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """A tensor like the (fake) gradient with the parameter's strides: the copy's value."""
    from torch._subclasses.fake_tensor import maybe_get_fake_mode

    from .costs import real_mode

    mode = maybe_get_fake_mode(grad)
    with real_mode():
        if mode is None:
            return torch.empty_strided(grad.shape, param.stride(), dtype=grad.dtype, device="meta")
        with mode:
            return torch.empty_strided(grad.shape, param.stride(), dtype=grad.dtype, device=grad.device)
