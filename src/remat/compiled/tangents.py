"""Gradients of the outputs a loss does not use: never allocated.

Under torch.compile a graph runs as one autograd function (AOTAutograd's ``CompiledFunction``).
When the backward reaches it, autograd hands it a gradient for every differentiable output, and
for those no gradient reached it allocates zeros of the output's size: a language model given
``labels`` returns its logits beside the loss and, in transformers by default, every layer's key
and value cache. Eager autograd allocates none of those. On the CPU held-out Llama (4 layers,
vocabulary 4,096, batch 4 x 128) they were 10 MiB of the 26.3 MiB the backend's code got down to.

For a graph with a scalar output (the loss) the backend assumes that, as in ``optimize``, only
the loss is backpropagated from (``assumed_unused``: every other tangent):

- the function is told not to materialize missing gradients (``no_zero_grads``), so they
  arrive as None;
- the backward that runs reads no such tangent (``without``: each read of one becomes a
  stride-0 zero, no bytes), and the code's peak counts none (``code_peak(unused=...)``);
- a step whose gradient does reach one of those outputs (a second loss on the logits) runs the
  backward as traced, compiled when first needed, with the same gradients as eager, and is warned
  about: it holds that gradient on top of what the plan counted (``Backward``).

Both compilers: fx codegen wraps its backward in ``Backward`` (``backend``), inductor's compile of
the backward does (``fusion.inner_compile``). A graph so compiled is not stored in AOTAutograd's
cache (it stores inductor's own compiled graphs only): a recompile plans it again. Graphs with
symbolic sizes keep the zeros (a zero of their size would need the sizes at run time).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Iterator

import torch
import torch.fx as fx

from .jointgraph import is_tangent

ORIGINAL = "remat.backward_as_traced"   # ``without``'s graph ``meta`` key: ``Assumed``


class Assumed:
    """What ``without`` keeps on its graph: the backward as traced, and the plan's ``Planned`` (what
    it assumed; whether None comes). AOTAutograd deep-copies a backward before compiling it: this
    is shared, not copied."""

    def __init__(self, original: fx.GraphModule, planned: Any = None) -> None:
        self.original = original
        self.planned = planned

    def __deepcopy__(self, memo: dict) -> "Assumed":
        return self

    def __reduce__(self) -> Any:  # inductor pickles a graph's meta into its cache key: the graph itself differs
        return (str, ("remat.assumed",))


def assumed_unused(gm: fx.GraphModule) -> frozenset[str]:
    """The tangent placeholders of ``gm`` (a joint graph or a backward) assumed to get no
    gradient: all but the scalar ones, when one is scalar (a loss). Graphs with symbolic sizes:
    none (a zero of their size would need the sizes at run time)."""
    from .dynamic import is_dynamic, origin

    tangents = [n for n in gm.graph.find_nodes(op="placeholder") if is_tangent(n)
                and isinstance(n.meta.get("val"), torch.Tensor)]
    if is_dynamic(gm) or origin(gm) is not None or not any(n.meta["val"].dim() == 0 for n in tangents):
        return frozenset()
    return frozenset(n.name for n in tangents if n.meta["val"].dim() > 0)


def without(bw: fx.GraphModule, unused: frozenset[str]) -> fx.GraphModule:
    """``bw`` reading a zero (a scalar expanded: no bytes) wherever it read one of the ``unused``
    tangents; the tangent stays a placeholder, read by nothing. ``meta[ORIGINAL]`` keeps ``bw``."""
    if not unused:
        return bw
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    out = graph.output(graph.graph_copy(bw.graph, env))
    out.meta = dict(bw.graph.output_node().meta)
    for old, new in env.items():
        if old.op != "placeholder" or old.name not in unused or not new.users:
            continue
        val = old.meta["val"]
        with graph.inserting_after(new):
            zero = graph.call_function(torch.ops.aten.scalar_tensor.default, (0.0,),
                                       {"dtype": val.dtype, "device": val.device})
        with graph.inserting_after(zero):
            wide = graph.call_function(torch.ops.aten.expand.default, (zero, list(val.shape)))
        with getattr(val, "fake_mode", None) or contextlib.nullcontext():
            zero.meta["val"] = torch.zeros((), dtype=val.dtype, device=val.device)
            wide.meta["val"] = zero.meta["val"].expand(val.shape)
        new.replace_all_uses_with(wide, delete_user_cb=lambda u: u is not zero)
    gm = fx.GraphModule(bw, graph)
    gm.meta.update({k: v for k, v in bw.meta.items() if k != ORIGINAL})  # (the fusion guard)
    gm.meta[ORIGINAL] = Assumed(bw)
    return gm


def available() -> bool:
    """Whether this torch builds AOTAutograd's autograd function where ``no_zero_grads`` can reach it,
    and caches no compiled backward whole (a bundled autograd cache takes only inductor's own
    compiled graphs, not ``Backward``)."""
    from torch._functorch._aot_autograd import runtime_wrappers

    try:
        from torch._functorch._aot_autograd.autograd_cache import should_bundle_autograd_cache
    except ImportError:
        return False
    return hasattr(getattr(runtime_wrappers, "_AOTDispatchAutogradFunctionFactory", None), "build") \
        and not should_bundle_autograd_cache()


@contextlib.contextmanager
def no_zero_grads(when: Callable[[], Any]) -> Iterator[None]:
    """While torch.compile compiles one graph: the autograd function AOTAutograd builds for it
    hands its backward None, not zeros, for outputs no gradient reached, where ``when()`` (the
    graph's ``Planned``, once partitioned) assumed them unused; its ``zero_grads_skipped`` is set."""
    from torch._functorch._aot_autograd import runtime_wrappers

    factory = getattr(runtime_wrappers, "_AOTDispatchAutogradFunctionFactory", None)
    if not hasattr(factory, "build"):  # (``available`` is False: no plan assumed anything)
        yield
        return
    build = factory.build

    def built(self: Any) -> type:
        cls = build(self)
        planned = when()
        if planned is None or not planned.unused:
            return cls
        forward = cls.forward

        def no_zeros(ctx: Any, *args: Any) -> Any:
            ctx.set_materialize_grads(False)
            return forward(ctx, *args)

        cls.forward = staticmethod(no_zeros)
        planned.zero_grads_skipped = True
        return cls

    factory.build = built
    try:
        yield
    finally:
        factory.build = build


class Backward:
    """The compiled backward of ``without``'s graph ``gm``; on a step where a gradient reached one
    of the outputs it assumes unused, or where its autograd function could not be told to hand
    None for them (``Planned.zero_grads_skipped``), the backward as traced, compiled by
    ``compile_original`` when first needed, with zeros for the tangents that did not come."""

    def __init__(self, compiled: Callable, gm: fx.GraphModule,
                 compile_original: Callable[[fx.GraphModule], Callable]) -> None:
        self.compiled = compiled
        self.original, planned = gm.meta[ORIGINAL].original, gm.meta[ORIGINAL].planned
        self.compile_original = compile_original
        self.planned = planned
        placeholders = list(gm.graph.find_nodes(op="placeholder"))
        self.unused = [i for i, n in enumerate(placeholders) if n.name in planned.unused]
        # every tangent can come as None now: those read (a second scalar output the loss left
        # out, an auxiliary loss) get zeros, as autograd made them
        self.vals = {i: n.meta["val"] for i, n in enumerate(placeholders)
                     if is_tangent(n) and isinstance(n.meta.get("val"), torch.Tensor)}
        self.read = [i for i in self.vals if i not in self.unused]
        self._traced: Callable | None = None
        self._boxed_call = True  # (an instance attribute: dynamo's wrappers copy ``__dict__``)

    def __call__(self, args: list) -> Any:
        came = [args[i] for i in self.unused if args[i] is not None]
        if self.planned.zero_grads_skipped and not came:
            self._zeros(args, self.read)
            return self.compiled(args)
        if self._traced is None:
            if self.planned.zero_grads_skipped:
                warnings.warn(
                    f"remat: a gradient reached an output of graph {self.planned.joint.graph.name} other than its loss "
                    f"(shape {', '.join(str(tuple(t.shape)) for t in came)}). Its plan assumed only the loss is "
                    f"backpropagated from and counted none: steps like this one hold "
                    f"{sum(t.numel() * t.element_size() for t in came)} bytes more than planned. The gradients are "
                    "exact; detach the outputs you do not backpropagate through, or leave the budget that room",
                    stacklevel=2)
            self._traced = self.compile_original(self.original)
        self._zeros(args, self.vals)
        return self._traced(args)

    def _zeros(self, args: list, where: Any) -> None:
        for i in where:
            if args[i] is None:
                v = self.vals[i]
                args[i] = torch.zeros(v.shape, dtype=v.dtype, device=v.device)
