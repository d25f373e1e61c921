"""torch -> Graph: trace a model once on fake tensors and describe one training step as plain data.

``capture(model, example_inputs)`` returns a :class:`remat.Graph` whose nodes are the aten ops of
the model's forward, with real byte sizes (``mem``), compute costs (``cost``) and, for every node,
the forward values its backward really reads (``bwd_uses``, recorded from autograd's saved
tensors). ``trace`` returns the same graph together with the :class:`Program` the runtime
executes, so the graph that is planned and the ops that are run are one and the same.

How (DESIGN.md "The spine", seed 000 §2's graph of forward values):

1. ``make_fx`` traces ``functional_call(model, params, inputs)`` on FakeTensors (no activation
   memory is allocated, so ResNet152 at batch 256 is captured on a laptop), then a second
   ``make_fx`` over ``functionalize`` turns in-place ops on activations into out-of-place ones
   (mutations of buffers, e.g. BatchNorm's ``num_batches_tracked``, stay as trailing ``copy_``).
   Tracing the model first without functionalization keeps libraries that branch on
   ``isinstance(x, FakeTensor)`` (Hugging Face's mask helpers) on their tracing-safe path.
2. The fx graph is replayed on fresh fake tensors with autograd on. Each fx node whose outputs
   own new storage becomes a graph node (``mem`` = bytes of those storages); a node whose
   outputs only alias existing storage (views, ``getitem``, ``_unsafe_view``) is an *alias*:
   it owns nothing and is re-derived from its base when needed. Parameters, buffers and inputs
   are not graph nodes (always in memory).
3. ``saved_tensors_hooks`` observe what each op's autograd node saves; the saved tensors that
   are activations become ``bwd_uses`` of that node, so ``remat.simulate`` counts exactly what
   PyTorch keeps. An op whose backward keeps only some of its own outputs (batch norm's mean
   and inverse std, max pooling's indices) gets ``saved_mem``, the bytes of those.

Costs: ``"flops"`` (torch.utils.flop_counter; ops it has no formula for count one flop per
output element, so elementwise work is not free), ``"profile"`` (median wall time of each op
on real tensors: this one allocates the activations), ``"paper"`` (seed 000 §5: convolution 10,
everything else 1).

Tested against: the runtime (tests/test_runtime.py: gradients bit-identical to the eager
model, measured peaks within 10% of ``simulate`` on the captured graph), and hand-computed
byte sizes and saved tensors on small modules (tests/test_capture.py).
"""

from __future__ import annotations

import contextlib
import re
import statistics
import time
import traceback
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functional_call, functionalize
from torch.multiprocessing.reductions import StorageWeakRef

from . import progress
from .errors import CaptureError, InputError
from .compiled.mutated import mutated_inputs, reads_old_data
from .graph import Graph
from .hf_inputs import eager_positions, packed_positions, unchecked_values

COSTS = ("flops", "profile", "paper")


@dataclass(frozen=True)
class Step:
    """One fx call of the forward program.

    ``kind``: ``"op"`` (allocates: a graph node), ``"alias"`` (a view of existing storage,
    re-derived on demand), ``"effect"`` (a write-back into a buffer, run once per forward).
    """

    name: str
    target: Any
    args: tuple
    kwargs: dict
    kind: str
    reads: tuple[str, ...]         # fx names of the values it reads
    owners: tuple[str, ...]        # graph nodes whose storage this value lives in
    random: bool = False           # draws from an RNG: replay with the state of its first run
    mutates_state: bool = False    # writes into buffers it reads (BatchNorm running stats)
    self_saved: tuple[int, ...] | None = None  # the only outputs its own backward keeps (Node.saved_mem)


@dataclass(frozen=True)
class Output:
    """A tensor output of the forward: the fx value that holds it."""

    name: str


@dataclass
class Program:
    """What the runtime executes: the traced forward, bound to a model's own parameters."""

    graph: Graph
    steps: list[Step]
    placeholders: list[str]                 # fx names, in flat order
    state_names: list[str]                  # parameter then buffer names (model attribute paths)
    num_params: int
    buffer_placeholders: frozenset[str]
    in_spec: Any
    tensor_positions: list[int]             # leaf positions of tensor inputs in (args, kwargs)
    const_leaves: list[Any]                 # the input leaves, tensors replaced by None
    out_spec: Any
    out_leaves: list[Any]                   # Output(fx name) for a tensor output, else the constant
    key: tuple
    last_reader: dict[str, int] = field(default_factory=dict)  # fx name -> index of last step reading it
    saved_bytes_unmodeled: int = 0          # saved tensors that are no fx value (should be 0)


# ---------------------------------------------------------------------------------------------
# public entry points


def capture(model: nn.Module, example_inputs: Any, cost: str = "flops", name: str | None = None) -> Graph:
    """Graph of one training step of ``model`` on ``example_inputs`` (see module docstring).

    ``example_inputs``: a tensor, a tuple/list of positional arguments, or a dict of keyword
    arguments. Non-tensor arguments are baked into the trace.
    """
    return trace(model, example_inputs, cost=cost, name=name).graph


def trace(model: nn.Module, example_inputs: Any, cost: str = "flops", name: str | None = None) -> Program:
    """Trace ``model`` and build both the Graph and the Program the runtime executes."""
    if cost not in COSTS:
        raise InputError(f"unknown cost {cost!r}: use one of {', '.join(COSTS)}")
    check_model(model, example_inputs, "remat.capture")
    args, kwargs = split_inputs(example_inputs)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    state_names = list(params) + list(buffers)
    leaves, in_spec = pytree.tree_flatten((args, kwargs))
    tensor_positions = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    const_leaves = [None if isinstance(x, torch.Tensor) else x for x in leaves]
    flat = [*params.values(), *buffers.values(), *(leaves[i] for i in tensor_positions)]
    out_info: dict[str, Any] = {}

    def fn(*flat_in: torch.Tensor) -> list[torch.Tensor]:
        state = dict(zip(state_names, flat_in[: len(state_names)]))
        ins = list(const_leaves)
        for pos, t in zip(tensor_positions, flat_in[len(state_names):]):
            ins[pos] = t
        a, kw = pytree.tree_unflatten(ins, in_spec)
        out = functional_call(model, state, tuple(a), kw)
        out_leaves, out_spec = pytree.tree_flatten(out)
        out_info["spec"] = out_spec
        out_info["leaves"] = out_leaves
        return [x for x in out_leaves if isinstance(x, torch.Tensor)]

    label = name or type(model).__name__
    with eager_positions(packed_positions(kwargs)), unchecked_values():
        gm = _make_fx(fn, flat, label)
    _refuse_constants(gm, label)
    out_leaves = _output_leaves(out_info["leaves"], gm, label)
    prog = _build(gm, flat, state_names, len(params), set(buffers), cost, label)
    prog.in_spec, prog.tensor_positions, prog.const_leaves = in_spec, tensor_positions, const_leaves
    prog.out_spec, prog.out_leaves = out_info["spec"], out_leaves
    prog.key = signature(model, args, kwargs)
    return prog


def split_inputs(example_inputs: Any) -> tuple[tuple, dict]:
    """(args, kwargs) from a tensor, a tuple/list, or a dict of keyword arguments."""
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs), {}
    return (example_inputs,), {}


def signature(model: nn.Module, args: tuple, kwargs: dict) -> tuple:
    """What a trace depends on: input shapes/dtypes/devices, constants, train/eval of each module,
    and whether Hugging Face position ids mark packed sequences (``hf_inputs``)."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    desc = tuple((tuple(x.shape), x.dtype, x.device, x.requires_grad) if isinstance(x, torch.Tensor)
                 else ("const", repr(x)) for x in leaves)
    return (str(spec), desc, tuple(m.training for m in _modules(model)), packed_positions(kwargs))


_MODULES: "weakref.WeakKeyDictionary[nn.Module, list[nn.Module]]" = weakref.WeakKeyDictionary()


def _modules(model: nn.Module) -> list[nn.Module]:
    """``model.modules()``, listed once per model: a signature is taken every training step, and
    walking the tree each time cost a 158-module ResNet 0.2 ms. (A module added after planning
    changes the model the plan was traced from anyway.)"""
    mods = _MODULES.get(model)
    if mods is None:
        mods = _MODULES[model] = list(model.modules())
    return mods


# ---------------------------------------------------------------------------------------------
# tracing


def _make_fx(fn: Callable, flat: list[torch.Tensor], label: str) -> torch.fx.GraphModule:
    try:
        # quiet: torch logs a failed meta kernel's traceback before raising it
        with quiet_torch_logs(), progress.task(f"capturing {label} on fake tensors"):
            gm0 = make_fx(fn, tracing_mode="fake", _allow_non_fake_inputs=True)(*flat)
            return make_fx(functionalize(gm0, remove="mutations"), tracing_mode="fake",
                           _allow_non_fake_inputs=True)(*flat)
    except (CaptureError, InputError):
        raise
    except Exception as e:  # noqa: BLE001 - every tracing failure becomes one clear message
        raise _explain(e, label) from e


# loggers that print an internal traceback for a failure that is then raised (and explained)
_NOISY_LOGGERS = ("torch._subclasses.fake_tensor", "torch.fx.experimental.proxy_tensor",
                  "torch.fx.experimental.symbolic_shapes", "torch._functorch", "torch._dynamo")
_INPUT_WORDS = ("shape", "size mismatch", "mat1 and mat2", "reduction dim", "must match the size",
                "dimension", "expected input", "channels", "must be tensor", "same device",
                "expected all tensors", "dtype", "keyword argument", "positional argument",
                "not enough values", "too many values")


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[None]:
    """Silence torch's own error logs in the block: the error is raised and remat explains it."""
    import logging

    saved = [(log, log.level) for log in map(logging.getLogger, _NOISY_LOGGERS)]
    for log, _ in saved:
        log.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for log, level in saved:
            log.setLevel(level)


def check_model(model: Any, example_inputs: Any, where: str = "remat") -> None:
    """InputError unless ``model`` is an ``nn.Module`` and ``example_inputs`` hold a tensor."""
    if not isinstance(model, nn.Module):
        raise InputError(f"{where} needs a torch.nn.Module, got {type(model).__name__} {_short(model)}: wrap it "
                         f"in a module (a class whose forward calls it), or pass the model object, not its "
                         f"class or a function")
    if not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(example_inputs)):
        raise InputError(f"{where} needs example inputs holding at least one torch.Tensor, got "
                         f"{type(example_inputs).__name__} {_short(example_inputs)}: pass a tensor, a tuple of "
                         f"positional arguments or a dict of keyword arguments, e.g. torch.randn(8, 3, 224, 224)")


HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
# hooks whose whole effect the trace keeps: transformers' ``enable_input_require_grads`` (set by its
# gradient checkpointing and by PEFT) marks the embeddings' output as requiring a gradient
TRACED_HOOKS = ("enable_input_require_grads.<locals>.make_inputs_require_grads",)


def hooked_modules(model: nn.Module) -> list[str]:
    """Where ``model`` has module hooks (forward, forward-pre, backward, backward-pre), its own or
    the global ones (``nn.modules.module.register_module_forward_hook``), but ``TRACED_HOOKS``:
    "path (kind)" each."""
    from torch.nn.modules import module as nn_module

    def live(hooks: Any) -> bool:
        return any(not getattr(h, "__qualname__", "").endswith(TRACED_HOOKS) for h in (hooks or {}).values())

    def kind_name(kind: str) -> str:
        return kind.strip("_").replace("_", " ")[:-1]

    out = [f"global ({kind_name(kind)})" for kind in HOOKS if live(getattr(nn_module, f"_global{kind}", None))]
    for path, m in model.named_modules():
        out += [f"{path or type(model).__name__} ({kind_name(kind)})" for kind in HOOKS if live(getattr(m, kind, None))]
    return out


def warn_hooks(model: nn.Module, where: str = "remat.optimize") -> None:
    """Warn that module hooks run once, while the step is traced, not in each planned step: a hook
    that collects activations or gradients (for a loss, for logging) would keep the trace's."""
    hooked = hooked_modules(model)
    if hooked:
        import warnings

        more = f" and {len(hooked) - 3} more" if len(hooked) > 3 else ""
        warnings.warn(f"{where}: module hooks on {', '.join(hooked[:3])}{more} run once, while remat traces the "
                      f"step, not in each planned step (what they collect is the trace's). Remove them, or compile "
                      f"the model with torch.compile(model, backend=remat.backend(budget=...)), which runs them "
                      f"as torch.compile does", stacklevel=3)


def _short(x: Any, width: int = 60) -> str:
    text = " ".join(repr(x).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def explain(e: BaseException, label: str, doing: str = "trace") -> CaptureError | InputError:
    """One line for an exception raised while tracing (``doing="trace"``) or running
    (``"run"``) ``label`` on the example inputs: where in the user's code, what, and the fix.
    An InputError when the inputs do not fit the model or the model fails on them outside
    remat too, else a CaptureError."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if "/torch/" not in f.filename and "/remat/" not in f.filename and not f.filename.startswith("<")]
    where = f" at {frames[-1].filename}:{frames[-1].lineno} `{(frames[-1].line or '').strip()}`" if frames else ""
    first = (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(".")
    kind = type(e).__name__
    low = str(e).lower()
    error: type[CaptureError] | type[InputError] = CaptureError
    if "DynamicOutputShape" in kind:  # nonzero, unique, masked_select: a mixture of experts' token dispatch
        hint = ("an op's output size depends on tensor values (a mixture of experts' dispatch by nonzero), "
                "which one traced step cannot plan ahead: train it under torch.compile(model, "
                "backend=remat.backend(budget=...)) instead, which breaks the graph at that op and "
                "plans each part (HF DBRX trains so)")
    elif "DataDependent" in kind or "data-dependent" in low or "GuardOnDataDependent" in kind:
        hint = ("the model's Python code branches on a tensor's value (data-dependent control flow), "
                "which one traced step cannot plan ahead: train it under torch.compile(model, "
                "backend=remat.backend(budget=...)) instead, which breaks the graph at the branch and "
                "plans each part (HF Longformer and Wav2Vec2 train so), or rewrite the branch with "
                "torch.where / torch.cond")
    elif any(w in first.lower() for w in _INPUT_WORDS):
        error = InputError
        hint = ("the example inputs do not fit the model's forward (shape, dtype, device or arguments): "
                "pass what the model is called with in training, as a tensor, a tuple of positional "
                "arguments or a dict of keyword arguments")
    elif "convert all tensors to faketensors" in low:
        found = re.search(r"tensor\(\[.*?\], size=\(([^)]*)\)", str(e))
        size = f" (size ({found.group(1)}))" if found else ""
        hint = _unseen_tensor(size)
    elif "Unsupported" in kind or "fake" in low or "meta" in low:
        hint = ("an op has no fake/meta implementation, so its output size is unknown without running "
                "it: register one with torch.library.register_fake, or call that op outside the module")
    elif doing == "run":
        error = InputError
        hint = "the model fails on its example inputs outside remat too: fix the model or the inputs first"
    else:
        hint = "simplify or split the forward so that it can be traced with torch.fx make_fx"
    verb = "cannot trace" if doing == "trace" else "cannot run one training step of"
    return error(f"{verb} {label}{where}: {kind}: {first}. Hint: {hint}")


def _unseen_tensor(size: str) -> str:
    return (f"the forward reads a tensor{size} that is neither an argument nor a parameter or buffer "
            "of the module (a plain attribute, a global or a closure variable), so the plan cannot see it "
            "change between steps: pass it as an argument of forward, or register it with "
            "module.register_buffer")


def _refuse_constants(gm: torch.fx.GraphModule, label: str) -> None:
    """The trace baked in a tensor the forward reads from outside its arguments and state (``make_fx``
    makes it a constant): the same CaptureError as ``optimize``'s, not a KeyError where it is read."""
    for n in gm.graph.nodes:
        t = getattr(gm, n.target, None) if n.op == "get_attr" else None
        if not isinstance(t, torch.Tensor):
            continue
        size = " (size (" + ", ".join(str(d) for d in t.shape) + ("," if t.dim() == 1 else "") + "))"
        if any(u.target == torch.ops.aten.lift_fresh_copy.default for u in n.users):  # torch.tensor([...])
            hint = (f"the forward makes a tensor{size} from Python values (torch.tensor([...])), which a "
                    "trace can only bake in: make it once in __init__ with module.register_buffer and read that")
        else:
            hint = _unseen_tensor(size)
        raise CaptureError(f"cannot trace {label}: it reads a tensor the trace can only bake in. Hint: {hint}")


_explain = explain


def _output_leaves(leaves: list[Any], gm: torch.fx.GraphModule, label: str) -> list[Any]:
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    tensor_outs = list(pytree.tree_leaves(out_node.args[0]))
    res, k = [], 0
    for x in leaves:
        if isinstance(x, torch.Tensor):
            res.append(Output(tensor_outs[k].name))
            k += 1
        elif isinstance(x, (int, float, bool, str, type(None))):
            res.append(x)
        else:
            raise CaptureError(f"{label} returns a {type(x).__name__}, which holds state that cannot be "
                               f"replayed; make forward return tensors only (for Hugging Face models pass "
                               f"use_cache=False)")
    return res


# ---------------------------------------------------------------------------------------------
# building the Graph and the Program from one fake replay


def register_outputs(ident: dict[int, tuple], name: str, value: Any) -> None:
    """Remember which fx value (and tuple index) each tensor object is, so a saved tensor seen in
    a saved-tensors hook can be traced back to the value that holds it."""
    if isinstance(value, torch.Tensor):
        ident[id(value)] = (weakref.ref(value), name, None)
    elif isinstance(value, (tuple, list)):
        for i, t in enumerate(value):
            if not isinstance(t, torch.Tensor):
                continue
            known = ident.get(id(t))
            # an element that is an earlier value's tensor keeps that name; an entry left by a
            # dead tensor whose id Python has reused must not (its saved tensors would go unmatched)
            if known is None or known[0]() is not t:
                ident[id(t)] = (weakref.ref(t), name, i)


class _Replay:
    """Runs the fx graph on fake tensors with autograd, recording storage ownership and saved tensors."""

    def __init__(self) -> None:
        self.owner_of_storage: dict[StorageWeakRef, str | None] = {}  # None: parameter/buffer/input
        self.ident: dict[int, tuple[weakref.ref, str, int | None]] = {}
        self.pending: list[torch.Tensor] = []

    def register(self, name: str, value: Any) -> None:
        register_outputs(self.ident, name, value)

    def lookup(self, t: torch.Tensor) -> tuple[str, int | None] | None:
        hit = self.ident.get(id(t))
        if hit is None or hit[0]() is not t:
            return None
        return hit[1], hit[2]


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    return (x for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor))


def _build(gm: torch.fx.GraphModule, flat: list[torch.Tensor], state_names: list[str], num_params: int,
           buffer_names: set[str], cost: str, label: str) -> Program:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    nodes = list(gm.graph.nodes)
    placeholders = [n.name for n in nodes if n.op == "placeholder"]
    buffer_ph = frozenset(placeholders[i] for i, s in enumerate(state_names) if s in buffer_names)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    rep = _Replay()
    env: dict[str, Any] = {}
    with mode:
        for ph, t in zip(placeholders, flat):
            ft = mode.from_tensor(t)
            if t.requires_grad and not ft.requires_grad:
                ft.requires_grad_(True)
            env[ph] = ft
            rep.owner_of_storage[StorageWeakRef(ft.untyped_storage())] = None
            rep.register(ph, ft)

    specs: list[tuple] = []  # id, mem, cost, inputs, op, grad_alias, requires_grad, saved_mem, grad_mem
    steps: list[Step] = []
    kind_of: dict[str, str] = {n: "placeholder" for n in placeholders}
    owners_of: dict[str, tuple[str, ...]] = {n: () for n in placeholders}
    saved: dict[str, list[str]] = {}
    unmodeled = 0
    mutated = mutated_inputs(nodes)  # inputs the step writes into, and the views of them
    pinned: set[str] = set()  # values read from their old data: never recomputed (``compiled.mutated``)

    def pack(t: torch.Tensor) -> torch.Tensor:
        rep.pending.append(t)
        return t

    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    with mode, torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        for n in nodes:
            if n.op != "call_function":
                continue
            args = torch.fx.node.map_arg(n.args, lambda a: env[a.name])
            kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: env[a.name])
            rep.pending.clear()
            if cost == "flops":
                with FlopCounterMode(display=False) as fc:
                    out = n.target(*args, **kwargs)
                flops = fc.get_total_flops()
            else:
                out = n.target(*args, **kwargs)
                flops = 0
            env[n.name] = out
            reads = tuple(dict.fromkeys(a.name for a in n.all_input_nodes))
            new_bytes, owners = _ownership(rep, n.name, out)
            is_effect = _is_write_back(n, kind_of)
            kind = "effect" if is_effect else ("op" if new_bytes is not None else "alias")
            if kind == "alias":
                owners = tuple(dict.fromkeys(o for o in owners if o is not None)) or \
                    tuple(dict.fromkeys(o for r in reads for o in owners_of[r]))
            else:
                owners = (n.name,) if kind == "op" else ()
            kind_of[n.name] = kind
            owners_of[n.name] = owners
            if kind == "alias" and any(a in mutated for a in n.all_input_nodes):
                mutated.add(n)
            elif kind == "op" and reads_old_data(n, mutated):
                pinned.add(n.name)
            rep.register(n.name, out)
            own_saved: dict[StorageWeakRef, int] = {}  # storages of its own outputs its backward keeps
            own_index: set[int] = set()
            for t in rep.pending:
                hit = rep.lookup(t)
                if hit is None:
                    unmodeled += t.untyped_storage().nbytes()
                    continue
                if kind == "op":  # views and getitem save nothing worth modelling
                    saved.setdefault(n.name, []).extend(owners_of[hit[0]])
                    ref = StorageWeakRef(t.untyped_storage())
                    if rep.owner_of_storage.get(ref) == n.name:
                        own_saved[ref] = t.untyped_storage().nbytes()
                        own_index.add(-1 if hit[1] is None else hit[1])
            rep.pending.clear()
            part = sum(own_saved.values())
            split = kind == "op" and bool(own_saved) and part < new_bytes and -1 not in own_index and \
                isinstance(out, (tuple, list))
            steps.append(Step(
                name=n.name, target=_eager_equivalent(n.target), args=n.args, kwargs=dict(n.kwargs), kind=kind,
                reads=reads, owners=owners, random=_is_random(n.target), mutates_state=_mutates_args(n.target),
                self_saved=tuple(sorted(own_index)) if split else None))
            if kind == "op":
                inputs = tuple(dict.fromkeys(o for r in reads for o in owners_of[r]))
                alias = tuple(dict.fromkeys(o for r in _grad_passthrough(n, out, env) for o in owners_of[r]))
                grad = any(t.requires_grad for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
                grad_bytes = _grad_bytes(out) if grad else None
                specs.append((n.name, new_bytes, _cost(cost, n, flops, out), inputs, _op_name(n.target), alias, grad,
                              part if split else None, grad_bytes if grad_bytes != new_bytes else None))
    times = _profile_times(steps, placeholders, flat) if cost == "profile" else {}
    g = Graph(name=label)
    for v, mem, c, inputs, op, alias, grad, part, grad_bytes in specs:
        allowed = set(inputs) | {v}
        uses = [u for u in dict.fromkeys(saved.get(v, ())) if u in allowed]
        g.add_node(v, mem=mem, cost=times.get(v, c), inputs=inputs, op=op, bwd_uses=uses,
                   grad_alias=[u for u in alias if u in inputs], requires_grad=grad,
                   saved_mem=part if v in uses else None, grad_mem=grad_bytes)
    out_node = next(n for n in nodes if n.op == "output")
    last = {}
    for i, s in enumerate(steps):
        for r in s.reads:
            last[r] = i
    for a in pytree.tree_leaves(out_node.args[0]):
        if isinstance(a, torch.fx.Node):
            last[a.name] = len(steps)
    if len(g) == 0:
        raise CaptureError(f"{label}'s forward computes nothing from its inputs: nothing to plan")
    g.validate()
    if pinned:
        g.pinned = frozenset(pinned)
    return Program(graph=g, steps=steps, placeholders=placeholders, state_names=state_names,
                   num_params=num_params, buffer_placeholders=buffer_ph, in_spec=None, tensor_positions=[],
                   const_leaves=[], out_spec=None, out_leaves=[], key=(), last_reader=last,
                   saved_bytes_unmodeled=unmodeled)


def _ownership(rep: _Replay, name: str, out: Any) -> tuple[float | None, tuple[str | None, ...]]:
    """Bytes of the new storages ``out`` owns (None when it owns none), and the owners of the rest."""
    new, owners = 0, []
    fresh = False
    for t in _tensors(out):
        ref = StorageWeakRef(t.untyped_storage())
        if ref in rep.owner_of_storage:
            owner = rep.owner_of_storage[ref]
            if owner != name:
                owners.append(owner)
            continue
        rep.owner_of_storage[ref] = name
        new += t.untyped_storage().nbytes()
        fresh = True
    return (new if fresh else None), tuple(owners)


def _grad_bytes(out: Any) -> int:
    """Bytes of the gradient of ``out``: its outputs that require grad, each a dense buffer."""
    return sum(t.numel() * t.element_size() for t in _tensors(out) if t.requires_grad)


def _is_write_back(n: torch.fx.Node, kind_of: dict[str, str]) -> bool:
    """functionalize's trailing ``copy_(buffer, new_value)``: a side effect on model state."""
    return (n.target is torch.ops.aten.copy_.default and isinstance(n.args[0], torch.fx.Node)
            and kind_of.get(n.args[0].name) == "placeholder")


def _bernoulli_p(x: torch.Tensor, p: float = 0.5, *, generator: Any = None) -> torch.Tensor:
    return torch.empty_like(x).bernoulli_(p, generator=generator)


def _bernoulli_t(x: torch.Tensor, p: torch.Tensor, *, generator: Any = None) -> torch.Tensor:
    return torch.empty_like(x).bernoulli_(p, generator=generator)


def _uniform(x: torch.Tensor, low: float = 0.0, high: float = 1.0, *, generator: Any = None) -> torch.Tensor:
    return torch.empty_like(x).uniform_(low, high, generator=generator)


def _eager_equivalent(target: Any) -> Any:
    """The in-place random op that functionalization replaced, run on a stride-preserving copy.

    Eager dropout draws into ``empty_like(x).bernoulli_(p)``, whose layout follows x; the
    functional ``bernoulli.p`` allocates a contiguous result, so on a non-contiguous x it draws
    the same numbers into different elements. Replaying the in-place form keeps masks identical.
    """
    return _EAGER_RANDOM.get(target, target)


_EAGER_RANDOM = {torch.ops.aten.bernoulli.p: _bernoulli_p, torch.ops.aten.bernoulli.Tensor: _bernoulli_t,
                 torch.ops.aten.uniform.default: _uniform}


def _is_random(target: Any) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(target, "tags", ())


def _mutates_args(target: Any) -> bool:
    """Ops that write into an argument: BatchNorm updates running stats without saying so."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return False
    if "batch_norm" in schema.name and "functional" not in schema.name:
        return True
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


# Ops whose backward hands the incoming gradient (or a view of it) to these arguments without
# allocating: AddBackward / SubBackward (self) / CloneBackward return grad itself, CatBackward
# and StackBackward return slices of it. Anything broadcast or cast is excluded below.
_PASSTHROUGH = {
    torch.ops.aten.add.Tensor: (0, 1), torch.ops.aten.sub.Tensor: (0,),
    torch.ops.aten.clone.default: (0,), torch.ops.aten.cat.default: "list",
    torch.ops.aten.stack.default: "list",
}


def _grad_passthrough(n: torch.fx.Node, out: Any, env: dict[str, Any]) -> list[str]:
    """Names of the fx arguments of ``n`` whose gradient is n's gradient buffer (see Node.grad_alias)."""
    which = _PASSTHROUGH.get(n.target)
    if which is None or not isinstance(out, torch.Tensor):
        return []
    if which == "list":
        args = [a for a in n.args[0] if isinstance(a, torch.fx.Node)]
    else:
        if n.kwargs.get("alpha", 1) != 1:
            return []
        args = [n.args[i] for i in which if i < len(n.args) and isinstance(n.args[i], torch.fx.Node)]
    keep = []
    for a in args:
        t = env.get(a.name)
        if not isinstance(t, torch.Tensor) or t.numel() * t.element_size() != t.untyped_storage().nbytes():
            continue  # a view of part of a value (U-Net's crop): its gradient is a new, full-size buffer
        if which == "list" or (t.shape == out.shape and t.dtype == out.dtype):
            keep.append(a.name)
    return keep


def _op_name(target: Any) -> str:
    return str(getattr(target, "__name__", target)).replace("aten::", "")


def _numel(out: Any) -> int:
    return sum(t.numel() for t in _tensors(out))


def _cost(cost: str, n: torch.fx.Node, flops: int, out: Any) -> float:
    if cost == "paper":
        return 10.0 if "convolution" in _op_name(n.target) else 1.0
    if cost == "flops":
        return float(max(flops, _numel(out)))
    return 0.0  # "profile" fills it in afterwards


def _profile_times(steps: list[Step], placeholders: list[str], flat: list[torch.Tensor],
                   repeats: int = 3) -> dict[str, float]:
    """Median wall time of each op on real tensors (allocates the activations once)."""
    env: dict[str, Any] = dict(zip(placeholders, flat))
    times: dict[str, float] = {}
    with torch.no_grad():
        for s in steps:
            args = torch.fx.node.map_arg(s.args, lambda a: env[a.name])
            kwargs = torch.fx.node.map_arg(s.kwargs, lambda a: env[a.name])
            if s.kind == "effect":
                continue
            if s.mutates_state:
                args = tuple(a.clone() if isinstance(a, torch.Tensor) and not a.requires_grad else a for a in args)
            samples = []
            for _ in range(repeats if s.kind == "op" else 1):
                started = time.perf_counter()
                env[s.name] = s.target(*args, **kwargs)
                samples.append(time.perf_counter() - started)
            times[s.name] = statistics.median(samples)
    return times
