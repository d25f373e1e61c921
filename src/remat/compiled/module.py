"""The module ``remat.optimize`` returns: the model's training step as two fx-generated Python
functions (AOTAutograd's ``aot_module_simplified`` with remat's partitioner), no interpreter.

A plan is made per key: the input signature (shapes, dtypes, devices, constants, train/eval
flags) and the autocast state (device types enabled, their dtypes). The plan of a key is
traced under that state, so its casts are explicit ops in the graphs; the graphs then run with
autocast off, since a second autocast pass over explicit casts would change nothing but the
speed. Evaluation and ``no_grad`` calls run the model itself.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree
from torch import nn

from . import accumulate
from .eager_ops import eager_dropout, eager_grouped_mm, eager_layouts
from ..hf_inputs import eager_positions, packed_positions, plain_mask, unchecked_values
from .partitioner import Planned, Planner

AUTOCAST_DEVICES = ("cpu", "cuda")
_TENSOR = object()  # marks where a tensor output goes among the output constants


def autocast_state() -> tuple:
    """(device type, dtype) of every device type autocast is on for: part of a plan's key."""
    state = []
    for d in AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(d):
                state.append((d, torch.get_autocast_dtype(d)))
        except (RuntimeError, AttributeError):
            continue
    return tuple(state)


def plan_key(model: nn.Module, args: tuple, kwargs: dict) -> tuple:
    """What a compiled step depends on: the input signature and the autocast state."""
    from ..capture import signature

    kwargs = plain_mask(model, kwargs)
    return (*signature(model, args, kwargs), autocast_state())


class _Flat(nn.Module):
    """The model as AOTAutograd wants it: tensors in, a tuple of tensors out; constants in the
    inputs and outputs (flags, None, ints) are fixed by the example and restored around it."""

    def __init__(self, model: nn.Module, args: tuple, kwargs: dict) -> None:
        super().__init__()
        # the model is not a submodule: its parameters and buffers are the step's first inputs, read
        # when it runs (state()), each tied tensor once, so that the joint graph sums a tied weight's
        # gradient as eager autograd does and a wrapper that swaps parameters (FSDP2) is followed
        object.__setattr__(self, "model", model)
        self.state_names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
        self.slots = state_slots(model)
        leaves, self.in_spec = pytree.tree_flatten((args, kwargs))
        self.positions = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        self.consts = [None if isinstance(x, torch.Tensor) else x for x in leaves]
        self.out_spec: Any = None
        self.out_consts: list[Any] = []
        self.dropped: list[str] = []
        self.loss_only: dict[str, list[int]] = {}  # outputs detached beside the loss (``_loss_only``)
        self.autocast = autocast_state()  # applied inside the trace, so the backward is traced without it
        self.traced_state = [(t.dtype, t.device) for _, t in (*model.named_parameters(), *model.named_buffers())]

    def tensors(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The step's inputs: the model's parameters and buffers as they are now, then the call's tensors."""
        leaves = pytree.tree_leaves((args, kwargs))
        return [*self.state(), *(leaves[i] for i in self.positions)]

    def state(self) -> list[torch.Tensor]:
        """The model's parameters and buffers as they are now (the step's first inputs)."""
        try:
            state = [getattr(m, kind)[key] for m, kind, key in self.slots]
        except KeyError:
            state = [None]
        if any(t is None or type(t).__name__ == "DTensor" for t in state):  # moved, removed or sharded
            state = state_tensors(self.model, len(self.state_names))  # says which
        return state

    def moved(self, flat: list[torch.Tensor]) -> str | None:
        """Which state tensor (parameter or buffer) has another dtype or device than when traced,
        and how: the first one, or None."""
        for name, t, (dtype, device) in zip(self.state_names, flat, self.traced_state):
            if t.dtype != dtype or t.device != device:
                return (f"{name} is {str(t.dtype).replace('torch.', '')} on {t.device}, traced as "
                        f"{str(dtype).replace('torch.', '')} on {device},")
        return None

    def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        state = dict(zip(self.state_names, flat))
        flat = flat[len(self.state_names):]
        leaves = list(self.consts)
        for i, t in zip(self.positions, flat):
            leaves[i] = t
        a, kw = pytree.tree_unflatten(leaves, self.in_spec)
        with contextlib.ExitStack() as stack:  # the forward's autocast, and only the forward's
            for device, dtype in self.autocast:
                stack.enter_context(torch.autocast(device_type=device, dtype=dtype))
            out = _drop_caches(torch.func.functional_call(self.model, state, a, kw, tie_weights=True), self.dropped)
        out, self.loss_only = _loss_only(out)
        out_leaves, self.out_spec = pytree.tree_flatten(out)
        self.out_consts = [_TENSOR if isinstance(x, torch.Tensor) else x for x in out_leaves]
        return tuple(x for x in out_leaves if isinstance(x, torch.Tensor))

    def rebuild(self, tensors: list[torch.Tensor] | tuple) -> Any:
        it = iter(tensors)
        leaves = [next(it) if c is _TENSOR else c for c in self.out_consts]
        out = pytree.tree_unflatten(leaves, self.out_spec)
        if self.loss_only:  # a gradient into the other outputs was not planned: say so if one comes
            for name in self.loss_only:
                leaves, spec = pytree.tree_flatten(out[name])
                out[name] = pytree.tree_unflatten(
                    [_Unplanned.apply(t, _ANCHOR, name) if k in self.loss_only[name] else t
                     for k, t in enumerate(leaves)], spec)
        return out


_ANCHOR = torch.zeros((), requires_grad=True)  # makes _Unplanned's outputs require grad


def _loss_only(out: Any) -> tuple[Any, dict[str, list[int]]]:
    """An output with a scalar ``loss`` beside other differentiable tensors (a Hugging Face
    model given labels): those others detached (nested ones too: a vision tower's own outputs
    inside a multimodal model's, LLaVA's ``image_outputs``), and for each name the positions of
    the detached tensors among its leaves.

    Why: AOTAutograd's backward takes a gradient for every differentiable output, and autograd
    hands it a zeros tensor for each one the loss does not flow through: for a causal LM a
    logits-sized buffer (batch x sequence x vocabulary) allocated when the backward starts, the
    step's peak. Eager autograd allocates nothing for them."""
    from collections.abc import MutableMapping

    if not isinstance(out, MutableMapping):
        return out, {}
    loss = out.get("loss")
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.requires_grad):
        return out, {}
    detached: dict[str, list[int]] = {}
    for k in [k for k in out.keys() if k != "loss"]:
        leaves, spec = pytree.tree_flatten(out[k])
        where = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.requires_grad]
        if where:
            detached[k] = where
            out[k] = pytree.tree_unflatten([t.detach() if i in where else t for i, t in enumerate(leaves)], spec)
    return out, detached


class _Unplanned(torch.autograd.Function):
    """An output the planned step computes no gradient through (``_loss_only``): the tensor
    itself, whose backward, if a loss ever reaches it, raises instead of dropping that gradient."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, anchor: torch.Tensor, name: str) -> torch.Tensor:
        ctx.name = name
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        from ..errors import StepError

        raise StepError(
            f"remat: a gradient reached the model's `{ctx.name}` output, which the planned step computes no "
            f"gradient through: the model returns a `loss`, and remat plans the step for that loss alone "
            f"(a gradient buffer for `{ctx.name}` would be allocated at the peak otherwise). To train on "
            f"`{ctx.name}` too, call the model without the arguments that make it compute `loss` (labels) "
            f"and compute every loss outside it, from its outputs")


def state_slots(model: nn.Module) -> list[tuple[nn.Module, str, str]]:
    """Where each of ``model``'s parameters and buffers is held (module, ``_parameters`` or
    ``_buffers``, name), each tensor once, in ``named_parameters()`` then ``named_buffers()`` order.
    Read each step, they follow a tensor swapped in its place (FSDP2, ``load_state_dict(assign=True)``)
    without walking the module tree, which cost a 158-module ResNet 0.3 ms a step."""
    slots = []
    for kind in ("_parameters", "_buffers"):
        seen: set[int] = set()
        for m in model.modules():
            for key, t in getattr(m, kind).items():
                if t is not None and id(t) not in seen:
                    seen.add(id(t))
                    slots.append((m, kind, key))
    return slots


def state_tensors(model: nn.Module, count: int) -> list[torch.Tensor]:
    """``model``'s parameters and buffers (each tensor once), as a compiled step takes them."""
    from ..errors import StepError

    state = [*(p for _, p in model.named_parameters()), *(b for _, b in model.named_buffers())]
    if len(state) != count:
        raise StepError(f"remat: the model has {len(state)} parameters and buffers, its plan was made for "
                           f"{count}: parameters were added or removed after remat.optimize; optimize it again")
    for t in state:
        if type(t).__name__ == "DTensor":
            raise StepError(
                "remat: a parameter is a DTensor (sharded) when the planned step runs: FSDP2's fully_shard was "
                "applied to a submodule of the optimized model, whose hooks the planned step does not call. "
                "Apply fully_shard to the module remat.optimize returns, and to nothing inside it: "
                "fully_shard(remat.optimize(model, ...)); or, to shard per block, compile the plain model instead: "
                "torch.compile(model, backend=remat.backend(budget=...)) plans each block's graph between FSDP's "
                "hooks")
    return state


def describe(args: tuple, kwargs: dict) -> str:
    """The input signature in words: ``input_ids 2x16 int64, labels 2x16 int64; autocast cpu bfloat16``."""
    def one(x: Any) -> str:
        if isinstance(x, torch.Tensor):
            return "x".join(map(str, x.shape)) + " " + str(x.dtype).removeprefix("torch.")
        return type(x).__name__ if isinstance(x, (dict, list, tuple)) else repr(x)[:20]

    parts = [one(a) for a in args] + [f"{k} {one(v)}" for k, v in kwargs.items()]
    ac = autocast_state()
    return ", ".join(parts) + "; autocast " + (", ".join(f"{d} {str(t).removeprefix('torch.')}" for d, t in ac)
                                                if ac else "off")


CACHES = ("cache", "past_key_values")  # transformers 5.24 renamed ``past_key_values`` to ``cache``


def _drop_caches(out: Any, dropped: list[str]) -> Any:
    """Training outputs that are caches (Hugging Face ``cache``, ``past_key_values`` before 5.24)
    are dropped: a training step never reads them, and holding them would hold every layer's keys
    and values. Read by key, not by the renamed attribute (which logs a deprecation)."""
    from collections.abc import MutableMapping

    for name in CACHES:
        if isinstance(out, MutableMapping):  # the raw keys: ``get`` of the old name logs a deprecation too
            cache = dict.get(out, name) if isinstance(out, dict) else (out[name] if name in out.keys() else None)
        elif name == "past_key_values":
            cache = getattr(out, name, None)
        else:
            continue
        if cache is None or isinstance(cache, torch.Tensor):
            continue
        if isinstance(out, MutableMapping):
            out[name] = None
        else:
            setattr(out, name, None)
        if name not in dropped:
            dropped.append(name)
    return out


@dataclass
class Step:
    """One compiled training step: the traced wrapper, the AOTAutograd function, the plan."""

    flat: _Flat
    fn: Callable
    planned: Planned
    compile_seconds: float
    # the plan recomputes nothing and its code peaks as eager's step does: run the model itself
    # (``optimize.EAGER_SHARE``), which costs nothing over it
    eager: bool = False
    # why tracing eager's path failed, where the step was traced the way torch.compile traces it (``traced``)
    compile_path: str | None = None

    def traced(self) -> str | None:
        """A report note where the step was traced with ``torch.compiler.is_compiling()`` set, so
        that libraries took their compile-time path, not eager's: a user comparing with eager should
        know which program runs."""
        if self.compile_path is None:
            return None
        return (f"traced as torch.compile traces it (torch.compiler.is_compiling() True), because eager's path "
                f"failed to trace ({self.compile_path}): libraries may compute otherwise there (transformers' "
                f"Mamba layers of Jamba take an associative scan for eager's sequential one), so gradients can "
                f"differ from eager's in the last bits")


def compile_step(model: nn.Module, args: tuple, kwargs: dict, planner: Planner) -> Step:
    """Trace ``model`` on these inputs with AOTAutograd and partition it with ``planner``."""
    import time

    from torch._functorch.aot_autograd import aot_module_simplified

    kwargs = plain_mask(model, kwargs)
    packed = packed_positions(kwargs)
    flat = _Flat(model, args, kwargs)
    started = time.perf_counter()
    count = len(planner.planned)
    # autocast: eager autograd runs the backward without it, so is it traced; dropout: traced as eager runs
    # it on this device; compiling flag: off first, so that libraries take eager's own path (Hugging Face's
    # mask helpers before transformers 5.24 build a causal mask under it where eager passes is_causal: on an
    # H200 the masked cuDNN attention took 2.1x the time), and on only where the first trace failed (a
    # branch on tensor values, e.g. packed position ids): then they take their tracing-safe path, as under
    # torch.compile
    from .. import progress
    from ..capture import explain, quiet_torch_logs
    from ..errors import RematError, StepError

    def trace(compiling: bool) -> Callable:
        # quiet: torch logs a failed meta kernel's traceback before raising it; remat explains it
        with _autocast_off(), _compiling() if compiling else contextlib.nullcontext(), _module_paths(model), \
                eager_dropout(), eager_layouts(), eager_grouped_mm(), eager_positions(packed), unchecked_values(), \
                quiet_torch_logs(), _no_donated_buffers(), \
                progress.task(f"capturing {type(model).__name__} (AOTAutograd) and planning"):
            # buffer updates (batch-norm statistics) stay in the forward graph, where they are made in
            # place (``batchnorm.update_statistics_in_place``), not copied in by AOTAutograd's epilogue
            # in Python (87 copies a step on the CPU ResNet: its step 1.054x eager's against 1.029x)
            return aot_module_simplified(flat, flat.tensors(args, kwargs), fw_compiler=fx_codegen,
                                         bw_compiler=backward, partition_fn=planner,
                                         keep_inference_input_mutations=True)

    def backward(gm: Any, example: list) -> Callable:  # where .grad is allocated, each gradient added in where made
        return accumulate.compiled(gm, example, fx_codegen, flat.state)

    planner.params = tuple(range(sum(1 for _ in model.named_parameters())))

    first: str | None = None
    try:
        try:
            fn = trace(compiling=False)
        except RematError:
            raise
        except Exception as e:  # noqa: BLE001 - traced again the way torch.compile would; its error is the one told
            first = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
            fn = trace(compiling=True)
    except RematError:
        raise
    except Exception as e:  # noqa: BLE001 - a tracing failure in the user's model becomes one clear line
        raise explain(e, type(model).__name__) from e
    if len(planner.planned) == count:
        raise StepError("remat: nothing in this step needs a gradient: put the model in training mode "
                        "(model.train()) and let its parameters require grad")
    return Step(flat=flat, fn=fn, planned=planner.planned[-1], compile_seconds=time.perf_counter() - started,
                compile_path=first)


def run(step: Step, args: tuple, kwargs: dict) -> Any:
    """Call a compiled step: autocast off around it (its casts are in the graph). A step that fails
    on parameters or buffers moved to another dtype or device since it was traced says so."""
    flat = step.flat.tensors(args, kwargs)
    try:
        with _autocast_off():
            out = step.fn(*flat)
    except RuntimeError as e:
        if (moved := step.flat.moved(flat)) is not None:
            from ..errors import StepError

            raise StepError(f"remat: the model's {moved} since remat.optimize planned it (model.to(...), "
                            f".half(), .cuda()): its plan is for the model as it was. Call remat.optimize(model, "
                            f"inputs, budget) again after moving or casting the model") from e
        raise
    return step.flat.rebuild(out)


@contextlib.contextmanager
def _module_paths(model: nn.Module) -> Any:
    """Every op traced inside a submodule's forward carries its path (``node.meta["custom"]``,
    read by ``jointgraph.build`` into ``Node.module``): what per-block plans and ``explain`` use."""
    import torch.fx.traceback as fxt

    from .jointgraph import MODULE_KEY

    stack: list[Any] = []
    handles = []

    def enter(path: str) -> Callable:
        def pre(_m: nn.Module, _args: Any) -> None:
            cm = fxt.annotate({MODULE_KEY: path})
            cm.__enter__()
            stack.append(cm)
        return pre

    def leave(_m: nn.Module, _args: Any, _out: Any) -> None:
        if stack:
            stack.pop().__exit__(None, None, None)

    for path, sub in model.named_modules():
        if path:
            handles.append(sub.register_forward_pre_hook(enter(path)))
            handles.append(sub.register_forward_hook(leave))
    try:
        with fxt.preserve_node_meta():
            try:
                yield
            finally:  # a forward that raised left annotations open: close them while the meta is there
                while stack:
                    stack.pop().__exit__(None, None, None)
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def _no_donated_buffers() -> Any:
    """No saved tensor donated to the backward, so that ``backward(retain_graph=True)`` (and
    ``create_graph``'s error) behave as in eager: AOTAutograd refuses to run a backward that owns
    donated tensors again. fx code writes over none of them, so the step's peak is the same (a
    4-layer Llama at 50-100%: to the byte). An empty list, not ``config.donated_buffer=False``:
    the check at backward time reads the config then, and takes a list left unset as donations."""
    from unittest import mock

    try:
        from torch._functorch._aot_autograd import graph_compile
        graph_compile.collect_bw_donated_buffer_idxs  # noqa: B018 - present in this torch?
    except (ImportError, AttributeError):  # AOTAutograd internals moved: nothing to patch
        yield
        return
    with mock.patch.object(graph_compile, "collect_bw_donated_buffer_idxs", lambda *args, **kwargs: []):
        yield


@contextlib.contextmanager
def _compiling() -> Any:
    """``torch.compiler.is_compiling()`` is True inside: what torch.compile's tracing sets."""
    import torch.compiler as tc

    if hasattr(tc, "_compile_session_context"):
        with tc._compile_session_context():
            yield
        return
    old = getattr(tc, "_is_compiling_flag", None)
    tc._is_compiling_flag = True
    try:
        yield
    finally:
        if old is None:
            del tc._is_compiling_flag
        else:
            tc._is_compiling_flag = old


def fx_codegen(gm: Any, example_inputs: list) -> Callable:
    """AOTAutograd's compiler for fx-generated Python (``boxed_nop``), run with autocast off.

    The graphs hold autocast's casts explicitly. A backward called inside an autocast region (on
    the CPU autograd runs it on the caller's thread, autocast still on) would otherwise send its
    ops through autocast again: a recomputed matmul cast to bf16 where the trace computed fp32."""
    from torch._dynamo.backends.debugging import boxed_nop

    if drop_detaches(gm.graph):
        gm.recompile()
    fn = boxed_nop(gm, example_inputs)

    def run(args: list) -> Any:
        with _autocast_off():
            return fn(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def drop_detaches(graph: torch.fx.Graph) -> int:
    """Read each ``detach`` that is not a graph output through its input instead, and remove it.

    Why: the graphs run without autograd, where a detach only makes another tensor object over the
    same storage; AOTAutograd's backward detaches every saved activation it reads again (a
    ResNet's relu outputs: 25 a step), each an op call from Python (that ResNet's no-recompute
    step: 1.053x eager's with them, 1.032x without, 40 interleaved rounds). Outputs keep theirs, so
    what the forward saves and returns is unchanged. Returns the detaches removed."""
    done = 0
    for n in list(graph.nodes):
        if (n.op == "call_function" and n.target is torch.ops.aten.detach.default
                and isinstance(n.args[0], torch.fx.Node) and all(u.op != "output" for u in n.users)):
            n.replace_all_uses_with(n.args[0])
            graph.erase_node(n)
            done += 1
    return done


def _autocast_off() -> contextlib.AbstractContextManager:
    state = autocast_state()
    if not state:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    for device, _ in state:
        stack.enter_context(torch.autocast(device_type=device, enabled=False))
    return stack


MANY_SIGNATURES = 3  # planned signatures after which a new one's warning names the ways to fewer


class CompiledModule(nn.Module):
    """The optimized model: a training call runs the compiled step planned for its key (input
    signature + autocast state); evaluation and ``no_grad`` calls run the model itself.

    ``module`` is the user's model (its parameters, buffers and ``state_dict``, no prefix). A
    call with a key not planned yet is planned once, and says so: by ``replan`` (set by
    ``remat.optimize``: the budget held as for the first key, measured, verified, cached) when
    the call's inputs are all positional or all keywords, else with ``make_planner()``.
    ``reports`` holds each key's report; ``report`` is the one of the key that ran last. Under
    ``torch.compile`` a training call runs outside dynamo, with a warning (``COMPILED_OUTSIDE``).
    """

    def __init__(self, module: nn.Module, make_planner: Callable[[], Planner]) -> None:
        nn.Module.__init__(self)
        self.module = module
        self._make_planner = make_planner
        self._steps: dict[tuple, Step] = {}
        self.step: Step | None = None
        self.report: Any = {}  # remat.report.Report once optimize has planned it
        self.reports: dict[tuple, Any] = {}
        self.replan: Callable[[Any], CompiledModule] | None = None  # example inputs -> a module planned for them

    def adopt(self, other: CompiledModule) -> None:
        """Take over the steps and reports ``other`` (optimized from the same model) planned."""
        self._steps.update(other._steps)
        self.reports.update(other.reports)

    def compile_for(self, args: tuple, kwargs: dict, planner: Planner | None = None) -> Step:
        """Plan and compile the step for these inputs (replacing any plan of their key)."""
        key = plan_key(self.module, args, kwargs)
        self.step = self._steps[key] = compile_step(self.module, args, kwargs, planner or self._make_planner())
        return self.step

    @property
    def plan(self) -> Any:
        return None if self.step is None else self.step.planned.plan

    @property
    def graph(self) -> Any:
        return None if self.step is None else self.step.planned.joint.graph

    @property
    def prediction(self) -> Any:
        return None if self.step is None else self.step.planned.prediction

    def explain(self, depth: int | None = None) -> Any:
        """What the plan keeps and recomputes per module, and the memory timeline of one step
        (``remat.explain.Explanation``: print it, ``save("plan.png")``, or show it in a notebook)."""
        from ..errors import StepError
        from ..explain import explain

        if self.step is None:
            raise StepError("remat: this module has no plan yet; call remat.optimize(model, inputs, budget) first")
        return explain(self, depth=depth, budget=self.report.get("budget") if self.report else None)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not (torch.is_grad_enabled() and self.module.training):
            return self.module(*args, **kwargs)
        if torch.compiler.is_compiling():  # torch.compile(module) or a compiled training step calling it
            return _train_uncompiled(self, args, kwargs)
        return self._train(args, kwargs)

    def _train(self, args: tuple, kwargs: dict) -> Any:
        given = kwargs
        kwargs = plain_mask(self.module, kwargs)  # once per step: the key and the call see the same inputs
        key = plan_key(self.module, args, kwargs)
        step = self._steps.get(key)
        if step is None:
            step = self._plan_new(key, args, kwargs)
        if step is not self.step:
            self.step = step
            self.report = self.reports.get(key, self.report)
        return self.module(*args, **given) if step.eager else run(step, args, kwargs)

    def _warn_compiled(self) -> None:
        import warnings

        if not getattr(self, "_compiled_warned", False):
            self._compiled_warned = True
            warnings.warn(COMPILED_OUTSIDE, stacklevel=4)

    def _plan_new(self, key: tuple, args: tuple, kwargs: dict) -> Step:
        import warnings

        how = ("within the budget as the first plan: measured, planned and verified on these inputs"
               if self.replan is not None and not (args and kwargs) else "planned on the simulated peak")
        many = "" if len(self._steps) < MANY_SIGNATURES else (
            f". This is signature {len(self._steps) + 1}: batches of many lengths are planned once each; pad them "
            f"to a few lengths (transformers' DataCollatorWithPadding(pad_to_multiple_of=64)), or compile with "
            f"torch.compile(model, backend=remat.backend(budget=...)), which plans one graph for every length")
        warnings.warn(f"remat: planning for a new input signature or autocast state ({describe(args, kwargs)}): "
                      f"{how}; pass every signature to remat.optimize(..., shapes=[...]) to plan it up front{many}",
                      stacklevel=6)  # the user's call: _train, forward, and nn.Module's two call wrappers between
        if self.replan is not None and not (args and kwargs):
            self.adopt(self.replan(kwargs if kwargs else args))
            if key in self._steps:
                return self._steps[key]
        return self.compile_for(args, kwargs)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        """Loaded through a wrapper (DDP, FSDP, a parent module): its keys are the model's under
        ``prefix``, as ``state_dict`` wrote them; the model is loaded from ``prefix + "module."``."""
        for k in [k for k in state_dict if k.startswith(prefix)]:
            state_dict[prefix + "module." + k[len(prefix):]] = state_dict.pop(k)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)


COMPILED_OUTSIDE = (
    "remat: torch.compile of the module remat.optimize returned runs its training step as remat's own "
    "fx-generated code, uncompiled: dynamo does not trace into a planned step (the budget still holds). "
    "For inductor-compiled code planned within a budget, compile the model itself: "
    "torch.compile(model, backend=remat.backend(budget=...))")


def _run_outside_compile(module: CompiledModule, args: tuple, kwargs: dict) -> Any:
    """A training call met while dynamo traces: run as outside it (one graph break), said once."""
    module._warn_compiled()
    return module._train(args, kwargs)


_train_uncompiled = torch.compiler.disable(_run_outside_compile, reason=COMPILED_OUTSIDE)
