"""The generated backward adds each parameter's gradient into its ``.grad`` where it is made.

AOTAutograd's backward returns every parameter's gradient when it ends. Where ``.grad`` is
allocated before the step (gradient accumulation, ``zero_grad(set_to_none=False)``, measured on
CUDA) autograd adds them in only then, so the compiled step holds all of them together at its
end, while eager autograd adds each one in as it is made: on the CPU-size HF ResNet that put the
least peak any plan's code could reach at 51-56% of eager's (1 MB of gradients held, recomputing
0.75-0.89 of a forward to make room for them).

Here the fx-generated backward (``remat.optimize``'s code) gets a second form: each parameter's
gradient is added into its ``.grad`` (an extra input) right after it is made, and None is returned
for it, so autograd accumulates nothing more; the gradient dies at once, as in eager. The sum is
autograd's own (``grad += new``, in place), so gradients stay bitwise eager's. That form runs
only where it is what autograd would do: every such parameter has a ``.grad`` of its own dtype,
shape and device, no hook on its gradient or its accumulation, no ``create_graph`` backward, and
no process group (DDP's reducer hooks autograd's accumulation where Python cannot see it). Anywhere
else the returning form runs, as before, and where ``.grad`` is then allocated the step holds more
than its plan: a warning says so once.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch
import torch.fx as fx

ACCUMULATED = "remat_accumulated"  # backward.meta: positions whose gradients it adds into .grad itself
ACCUMULATING = "remat_accumulating"  # the returning form's meta (as AOTAutograd gets it): the accumulating one
GRAD_OF = "remat_grad_of"          # an added placeholder's (and sum's) meta: the forward input whose .grad it is
UNHELD = "remat_unheld"            # backward.meta: the parameters' positions, where planned with .grad set to None


def in_place(forward: fx.GraphModule, backward: fx.GraphModule, params: tuple[int, ...]) -> list[int]:
    """Rewrite ``backward`` so that the gradient of each forward input at a position in ``params``
    (the model's parameters) is added into an extra input (its ``.grad``) right after its last
    use, and None returned in its place (``for_aot`` makes the returning form back, once the plan
    is chosen: the planner walks many). Returns the positions rewritten (those whose gradient has
    its parameter's shape and dtype)."""
    primals = list(forward.graph.find_nodes(op="placeholder"))
    out = next(iter(backward.graph.find_nodes(op="output")))
    outs = list(out.args[0]) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]
    done = [j for j in params if j < min(len(outs), len(primals)) and isinstance(outs[j], fx.Node)
            and _same(outs[j].meta.get("val"), primals[j].meta.get("val"))]
    if not done:
        return []
    pos = {n: i for i, n in enumerate(backward.graph.nodes)}
    after = {j: max((u for u in outs[j].users if u.op != "output"), key=pos.__getitem__, default=outs[j])
             for j in done}
    last = list(backward.graph.find_nodes(op="placeholder"))[-1]
    for j in done:
        with backward.graph.inserting_after(last):
            acc = backward.graph.placeholder(f"grad_of_primal_{j}")
        acc.meta.update(val=primals[j].meta["val"], **{GRAD_OF: j})
        last = acc
        with backward.graph.inserting_after(after[j]):
            add = backward.graph.call_function(torch.ops.aten.add_.Tensor, (acc, outs[j]))
        add.meta.update(val=acc.meta["val"], **{GRAD_OF: j})
        outs[j] = None
    out.args = (tuple(outs),)
    backward.recompile()
    backward.meta[ACCUMULATED] = done
    return done


def for_aot(backward: fx.GraphModule) -> fx.GraphModule:
    """The backward AOTAutograd is given: the returning form (each gradient returned, the added
    inputs and sums taken out again), the accumulating one in its meta."""
    if not backward.meta.get(ACCUMULATED):
        return backward
    returning = fx.GraphModule(backward, _copy(backward.graph))
    returning.meta.update({k: v for k, v in backward.meta.items() if k != ACCUMULATED})
    graph = returning.graph
    out = next(iter(graph.find_nodes(op="output")))
    outs = list(out.args[0])
    for n in list(graph.nodes):
        if GRAD_OF in n.meta and n.op == "call_function":
            outs[n.meta[GRAD_OF]] = n.args[1]
            graph.erase_node(n)
    for n in list(graph.find_nodes(op="placeholder")):
        if GRAD_OF in n.meta:
            graph.erase_node(n)
    out.args = (tuple(outs),)
    returning.recompile()
    returning.meta[ACCUMULATING] = backward
    return returning


def _same(g: Any, p: Any) -> bool:
    return (isinstance(g, torch.Tensor) and isinstance(p, torch.Tensor) and g.shape == p.shape
            and g.dtype == p.dtype and g.layout == torch.strided)


def _copy(graph: fx.Graph) -> fx.Graph:
    copied = fx.Graph()
    out = copied.graph_copy(graph, {})
    copied.output(out)
    return copied


def compiled(backward: fx.GraphModule, example: list, codegen: Callable[[fx.GraphModule, list], Callable],
             state: Callable[[], list[torch.Tensor]]) -> Callable:
    """``backward`` (``for_aot``'s) compiled by ``codegen``; where it has an accumulating form, a boxed callable that
    runs the accumulating form when autograd would accumulate the same way (the module's
    docstring), else the returning one. ``state()``: the forward's inputs as they are now (the
    model's parameters first)."""
    other = backward.meta.pop(ACCUMULATING, None)
    if other is None:
        return _unheld(codegen(backward, example), backward.meta.get(UNHELD, ()), state)
    done = other.meta[ACCUMULATED]
    returning = codegen(backward, example)
    added = [p.meta["val"] for p in other.graph.find_nodes(op="placeholder") if GRAD_OF in p.meta]
    accumulating = codegen(other, [*example, *added])
    warned: list[bool] = []

    def run(args: list) -> Any:
        params = state()
        grads = _grads(params, done)
        if grads is None:
            _warn_if_allocated(warned, lambda: params, done,
                               "remat: the backward returns the parameters' gradients when it ends (a hook on a "
                               "parameter, a process group or create_graph needs autograd's own accumulation): "
                               "with .grad allocated before the step, they are held together until then, above "
                               "the plan's peak")
            return returning(args)
        args.extend(grads)  # (boxed: the callee empties the list, so the saved values can be freed as used)
        return accumulating(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _unheld(fn: Callable, params: tuple[int, ...], state: Callable[[], list[torch.Tensor]]) -> Callable:
    """``fn``, a backward planned with ``.grad`` set to None before each step (``gradients="none"``, or
    ``"auto"`` off CUDA), that warns once when a parameter's ``.grad`` is allocated after all (gradient
    accumulation, ``zero_grad(set_to_none=False)``): autograd then adds the returned gradients in when the
    backward ends, so they are held together until then, above the plan's peak (a ViT's 50% plan on the
    CPU: 7.73 MB measured against 7.03 planned). The plan that counts them is ``gradients="allocated"``'s."""
    if not params:
        return fn
    warned: list[bool] = []

    def run(args: list) -> Any:
        _warn_if_allocated(warned, state, params,
                           "remat: .grad is allocated before this step (gradient accumulation, zero_grad("
                           "set_to_none=False)), but the plan was made for gradients set to None: the backward's "
                           "gradients are held until it ends, above the plan's peak. Pass gradients='allocated' "
                           "to remat.optimize or remat.backend to plan for it")
        return fn(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _warn_if_allocated(warned: list[bool], state: Callable[[], list[torch.Tensor]], positions: Any,
                       message: str) -> None:
    """Warn ``message`` once (``warned`` holds whether it was) when a parameter of ``state()`` at one of
    ``positions`` has its ``.grad`` allocated; ``state`` is not called once it was."""
    if warned:
        return
    params = state()
    if any(params[j].grad is not None for j in positions if j < len(params)):
        warned.append(True)
        warnings.warn(message, stacklevel=3)


def distributed() -> bool:
    """Whether a process group is up (DDP's reducer and FSDP hook autograd's accumulation): a step
    planned then keeps the returning form, and its plan counts the gradients it holds."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _grads(params: list[torch.Tensor], done: list[int]) -> list[torch.Tensor] | None:
    """Each rewritten parameter's ``.grad``, or None where autograd would not simply add into it."""
    if torch.is_grad_enabled() or distributed():
        return None
    grads = []
    for j in done:
        p = params[j]
        g = p.grad
        if (g is None or not p.is_leaf or g.shape != p.shape or g.dtype != p.dtype or g.device != p.device
                or g.layout != torch.strided or p._backward_hooks or getattr(p, "_post_accumulate_grad_hooks", None)):
            return None
        grads.append(g)
    return grads
