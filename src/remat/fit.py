"""``remat.fit``: the largest batch (or sequence length) whose training step fits, vanilla and
with remat, found on fake tensors, so no device memory is needed: a CPU-only machine answers
for a GPU.

    result = remat.fit(lambda n: build(batch=n), "24GiB")       # (model, inputs) for size n
    result = remat.fit("resnet50", device_memory="H100")        # a zoo name; the budget from the device
    print(result)                       # vanilla and remat's largest sizes, peaks, the time ratio

For each size ``n`` tried, ``model_fn(n)`` is built on the meta device (it runs under
``torch.device("meta")``; what it still puts elsewhere is moved there) and its training step
is traced with AOTAutograd on fake tensors: the planning Graph ``remat.optimize`` plans
(``compiled.jointgraph``). Then

- vanilla fits when the simulated peak of the plain step (``optimize.vanilla_peak``) is within
  the budget;
- remat fits when the smallest peak ``solver``'s plans reach (``optimize.smallest_choice``) is.

Both grow with ``n``. The largest ``n`` is found by bisection, guided by linear interpolation of
the peaks (exact in a step when memory is affine in ``n``, as it is in the batch size; plain
bisection halves the bracket whenever interpolation has not), each size traced once and shared
by both searches. Remat's plan at its largest size is then made at the budget for its
predicted time ratio (``report.time_ratio``).

The budget, as in ``optimize``, is bytes of activation memory: bytes or a size (``"24GiB"``);
a percentage is refused here, the vanilla peak it would be of changing with ``n``. Or
``device_memory``: a device from ``DEVICES`` (``"H100"``, ``"A100-40GB"``) or a size. The
budget is then the device's memory less what a training step holds besides activations:

- the parameters and buffers;
- a gradient per trainable parameter;
- the optimizer's states: ``optimizer="adam"`` (and ``"adamw"``) 2 per trainable parameter,
  ``"sgd"`` 0, ``"momentum"`` 1, or a number; each of the parameter's dtype;
- the step's inputs, at each size;
- ``reserve`` (default 1 GiB): the CUDA context, cuBLAS workspaces, the allocator's rounding.

Given both, the smaller budget applies. Memory is counted at the dtypes the model is built
in; ``dtype=torch.bfloat16`` converts floating parameters and inputs first (autocast's mixed
precision, with float32 master weights, is not modelled).
"""

from __future__ import annotations

import importlib
import math
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree
from torch import nn

from .compiled.costs import DEFAULT_COST
from .devices import DEVICES
from .errors import BudgetError, CaptureError, InputError
from .graph import Graph

GiB = 2**30

OPTIMIZERS = {"adam": 2, "adamw": 2, "sgd": 0, "momentum": 1, "none": 0}
DEFAULT_RESERVE = GiB


def _key(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


def device_bytes(device: str | int | float) -> tuple[str, float]:
    """(name, bytes) of a device from ``DEVICES``, ``"cuda"``/``"cuda:1"`` (this machine's), or a size."""
    if isinstance(device, str):
        found = {_key(k): k for k in DEVICES}.get(_key(device))
        if found is not None:
            return found, float(DEVICES[found])
        if device.strip().lower().startswith("cuda"):
            if not torch.cuda.is_available():
                raise InputError(f"device memory {device!r}: this machine has no CUDA device; name one instead "
                                 f"({', '.join(DEVICES)}) or give a size (80GiB)")
            props = torch.cuda.get_device_properties(torch.device(device))
            return props.name, float(props.total_memory)
    from .optimize import parse_budget

    try:
        size = parse_budget(device, math.nan)
    except (ValueError, TypeError):
        size = math.nan
    if math.isnan(size) or size <= 0:
        raise InputError(f"device memory {device!r} is neither a known device ({', '.join(DEVICES)}) nor a size "
                         f"(80GiB): name the device or give its memory")
    return str(device), size


def optimizer_states(optimizer: str | int) -> int:
    """States the optimizer keeps per trainable parameter (Adam 2, SGD 0, momentum 1, or the number)."""
    if isinstance(optimizer, bool):
        raise InputError(f"optimizer must be one of {', '.join(OPTIMIZERS)} or a number of states, got {optimizer!r}")
    if isinstance(optimizer, int) and optimizer >= 0:
        return optimizer
    if isinstance(optimizer, str):
        if optimizer.strip().isdigit():
            return int(optimizer)
        if optimizer.strip().lower() in OPTIMIZERS:
            return OPTIMIZERS[optimizer.strip().lower()]
    raise InputError(f"optimizer must be one of {', '.join(OPTIMIZERS)} or a number of states per parameter, "
                     f"got {optimizer!r}")


def absolute_budget(budget: Any, what: str = "budget", allow_zero: bool = False) -> float:
    """Bytes from a budget that does not depend on the vanilla peak (a percentage is refused)."""
    from .optimize import parse_budget

    if allow_zero and budget in (0, "0"):
        return 0.0
    b = parse_budget(budget, math.nan)
    if math.isnan(b):
        raise BudgetError(f"{what} {budget!r} is relative to the vanilla peak, which changes with the size "
                          f"fit varies: give bytes or a size (24GiB), or device_memory (H100)")
    if b <= 0 and not allow_zero:
        raise BudgetError(f"{what} {budget!r} leaves no memory for activations: give a size such as 24GiB")
    return b


# ---- one size: build on meta, trace on fake tensors ----------------------------------------------

@dataclass
class State:
    """Bytes a training step holds besides activations."""

    parameters: float
    buffers: float
    gradients: float
    optimizer: float
    inputs: float

    @property
    def total(self) -> float:
        return self.parameters + self.buffers + self.gradients + self.optimizer + self.inputs


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def state_bytes(model: nn.Module, inputs: Any, states: int) -> State:
    params = list(model.parameters())
    trainable = sum(_nbytes(p) for p in params if p.requires_grad)
    return State(parameters=float(sum(_nbytes(p) for p in params)),
                 buffers=float(sum(_nbytes(b) for b in model.buffers())),
                 gradients=float(trainable), optimizer=float(states * trainable),
                 inputs=float(sum(_nbytes(t) for t in pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor))))


def build_on_meta(model_fn: Callable[[int], Any], n: int | None,
                  dtype: torch.dtype | None = None) -> tuple[nn.Module, Any]:
    """``model_fn(n)`` under ``torch.device("meta")``, anything left elsewhere moved to meta."""
    with torch.device("meta"):
        built = model_fn(n)
    if not (isinstance(built, (tuple, list)) and len(built) == 2 and isinstance(built[0], nn.Module)):
        raise InputError(f"model_fn({n}) must return (model, example_inputs), got {type(built).__name__}")
    model, inputs = built
    if any(t.device.type != "meta" for t in (*model.parameters(), *model.buffers())):
        model = model.to("meta")
    if dtype is not None:
        model = model.to(dtype)

    def meta(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        if dtype is not None and x.is_floating_point():
            x = x.to(dtype=dtype)
        return x if x.device.type == "meta" else x.to("meta")

    return model.train(), pytree.tree_map(meta, inputs)


class _Grabbed(BaseException):
    """Carries the joint graph out of AOTAutograd (not an Exception: nothing on the way wraps it)."""

    def __init__(self, joint: Any) -> None:
        super().__init__("joint graph captured")
        self.joint = joint


class _Grab:
    """A partition function that builds the planning Graph and stops the compile there."""

    def __init__(self, name: str, cost: str, device: Any) -> None:
        self.name, self.cost, self.device = name, cost, device
        self.planned: list = []

    def __call__(self, gm: Any, _joint_inputs: Any, *, num_fwd_outputs: int, **_: Any) -> Any:
        from .compiled.jointgraph import build

        jg = build(gm, num_fwd_outputs, cost=self.cost, name=self.name, device=self.device)
        jg.graph.pinned = jg.pinned  # as the Planner does: generator states kept, draws replayed
        raise _Grabbed(jg)


def trace_graph(model: nn.Module, example_inputs: Any, name: str | None = None, cost: str = DEFAULT_COST,
                device: Any = None) -> Graph:
    """The planning Graph ``remat.optimize`` would plan for one training step of ``model``,
    traced on fake tensors (a meta-device model and inputs cost no memory)."""
    from .capture import split_inputs
    from .compiled.module import compile_step

    args, kwargs = split_inputs(example_inputs)
    grab = _Grab(name or type(model).__name__, cost, device)
    try:
        with warnings.catch_warnings():  # meta kernels without an autograd key (nll_loss) still trace
            warnings.filterwarnings("ignore", message=".*autograd kernel was not registered.*")
            compile_step(model, args, kwargs, grab)  # type: ignore[arg-type]
    except _Grabbed as g:  # tracing errors arrive as remat's CaptureError, explained by compile_step
        return g.joint.graph
    raise CaptureError(f"{name or type(model).__name__}: nothing in this step needs a gradient (is the model in "
                       f"training mode, and do its parameters require grad?)")


# ---- the search -----------------------------------------------------------------------------------

def largest(excess: Callable[[int], float], start: int = 1, cap: int = 2**20, lo: int = 0,
            points: dict[int, float] | None = None) -> int:
    """Largest ``n`` in [1, ``cap``] with ``excess(n) <= 0`` for a non-decreasing ``excess``
    (0 if none; ``lo``: a size known to fit). Bisection whose probes are predicted where it can:
    the root of the polynomial (degree <= 2) through the three values nearest the boundary, exact
    when memory is affine or quadratic in ``n`` (batch size; sequence length with materialized
    attention); the bracket is halved instead after two probes in a row on the same side.
    Before a size fails, the probes grow by doubling or by that prediction (64x at most)."""
    pts = {} if points is None else points

    def e(n: int) -> float:
        if n not in pts:
            pts[n] = excess(n)
        return pts[n]

    hi: int | None = None
    if lo <= 0:
        n = max(1, min(start, cap))
        if e(n) <= 0:
            lo = n
        else:
            lo, hi = 0, n
    streak, last = 0, None
    while True:
        if hi is not None and hi - lo <= 1:
            return lo
        if hi is None and lo >= cap:
            return lo
        guess = _predict(pts, lo, hi)
        if hi is None:
            grown = min(cap, max(2 * lo, 1))
            guess = grown if guess is None else min(cap, max(lo + 1, min(guess, 64 * max(lo, 1))))
        else:
            if guess is None or streak >= 2:
                guess = (lo + hi) // 2
            guess = max(lo + 1, min(guess, hi - 1))
        fits = e(guess) <= 0
        if fits:
            lo = guess
        else:
            hi = guess
        streak = streak + 1 if (fits == last and hi is not None) else 0
        last = fits


def _predict(pts: dict[int, float], lo: int, hi: int | None) -> int | None:
    """floor of the root of the polynomial through the (up to) three finite points nearest the
    boundary, if it lies in [lo, hi) (above lo when hi is None)."""
    known = sorted(n for n, v in pts.items() if math.isfinite(v))
    fit_side = [n for n in known if pts[n] <= 0 and n <= lo]
    over = [n for n in known if pts[n] > 0 and (hi is None or n >= hi)]
    if over:  # both sides of the boundary: the nearest on each, and one more from the side with more
        near = fit_side[-2:] + over[:1] if len(fit_side) >= 2 else fit_side[-1:] + over[:2]
    else:
        near = fit_side[-3:]
    if len(near) < 2:
        return None
    xs = [float(n) for n in near]
    ys = [pts[n] for n in near]
    root = _poly_root(xs, ys, lo, hi)
    if root is None and len(xs) == 3:  # the quadratic has no root there: the two nearest, linear
        root = _poly_root(xs[1:], ys[1:], lo, hi)
    return None if root is None else int(math.floor(root))


def _poly_root(xs: list[float], ys: list[float], lo: int, hi: int | None) -> float | None:
    if len(xs) == 2:
        (x0, x1), (y0, y1) = xs, ys
        if y1 == y0:
            return None
        roots = [x0 - y0 * (x1 - x0) / (y1 - y0)]
    else:  # Newton's divided differences: y = a + b (x - x0) + c (x - x0)(x - x1)
        (x0, x1, x2), (y0, y1, y2) = xs, ys
        d01, d12 = (y1 - y0) / (x1 - x0), (y2 - y1) / (x2 - x1)
        c = (d12 - d01) / (x2 - x0)
        # in powers of x: c x^2 + B x + C
        B = d01 - c * (x0 + x1)
        C = y0 - d01 * x0 + c * x0 * x1
        if abs(c) <= 1e-12 * (abs(B) + abs(C) / max(abs(x2), 1.0) + 1e-300):
            if B == 0:
                return None
            roots = [-C / B]
        else:
            disc = B * B - 4 * c * C
            if disc < 0:
                return None
            r = math.sqrt(disc)
            roots = [(-B - r) / (2 * c), (-B + r) / (2 * c)]
    inside = [x for x in roots if math.isfinite(x) and x >= lo and (hi is None or x < hi)]
    return min(inside) if inside else None


# ---- fit ---------------------------------------------------------------------------------------------

@dataclass
class Probe:
    """One size traced: its peaks (bytes) and the activation budget at that size."""

    n: int
    nodes: int
    budget: float
    vanilla_peak: float
    remat_floor: float | None = None   # smallest peak of the solver's plans (None: not asked)
    state: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class Fit:
    """Largest sizes that fit, vanilla and with remat (``str()`` for a table, ``to_json()``)."""

    name: str
    vary: str
    budget: float | None              # the activation budget given (bytes), if one was
    device: str | None
    device_memory: float | None
    reserve: float
    optimizer_states: int
    solver: str
    vanilla: int                      # largest size whose plain step fits (0: none)
    remat: int                        # largest size a remat plan fits (0: none)
    vanilla_peak: float | None        # simulated peak of the plain step at ``vanilla``
    remat_peak: float | None          # predicted peak of remat's plan at ``remat``
    remat_budget: float | None        # activation budget at ``remat``
    time_ratio: float | None          # predicted, of remat's plan at ``remat``
    chosen: str | None                # the solver whose plan that is
    capped: bool                      # remat still fits at ``cap``: the largest size is at least that
    cap: int
    state: dict[str, float]           # bytes held besides activations, at ``remat`` (or the last size)
    probes: list[Probe]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        """Lines under 80 columns: a table of both answers, then what the budget is made of."""
        from .optimize import fmt_bytes

        limit = (f"{fmt_bytes(self.device_memory)} ({self.device})" if self.device else
                 f"{fmt_bytes(self.budget)} of activations")
        out = [f"remat fit {self.name}: the largest {self.vary} that fits {limit}"]
        rows = [("", self.vary, "step peak", "time ratio"),
                ("vanilla", str(self.vanilla), fmt_bytes(self.vanilla_peak) if self.vanilla else "-",
                 "1.00x" if self.vanilla else "-"),
                ("remat", (">= " if self.capped else "") + str(self.remat),
                 fmt_bytes(self.remat_peak) if self.remat else "-",
                 f"{self.time_ratio:.2f}x ({self.chosen})" if self.time_ratio is not None else "-")]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        out += [("  " + "  ".join(c.ljust(w) if i in (0, 3) else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(r, widths)))).rstrip() for r in rows]
        if self.vanilla and self.remat:
            out.append(f"  remat: {self.remat / self.vanilla:.2f}x the vanilla {self.vary}; time ratio predicted "
                       f"from its plan")
        elif not self.remat:
            out.append(f"  even {self.vary} 1 does not fit, with or without remat")
        if self.capped:
            out.append(f"  remat still fits at {self.vary} {self.cap}, the largest tried (cap)")
        if self.device:
            s = self.state
            out += [f"  activations get {fmt_bytes(self.remat_budget or 0)} at {self.vary} {self.remat}: "
                    f"{fmt_bytes(self.device_memory)} less",
                    f"    parameters {fmt_bytes(s.get('parameters', 0))}, buffers {fmt_bytes(s.get('buffers', 0))},",
                    f"    gradients {fmt_bytes(s.get('gradients', 0))}, optimizer {fmt_bytes(s.get('optimizer', 0))} "
                    f"({self.optimizer_states} per parameter),",
                    f"    inputs {fmt_bytes(s.get('inputs', 0))}, reserve {fmt_bytes(self.reserve)}"]
            if self.budget is not None:
                out.append(f"  (or the budget of {fmt_bytes(self.budget)} where it is smaller)")
        out.append(f"  {len(self.probes)} sizes traced on fake tensors in {self.seconds:.1f} s, no device memory")
        return "\n".join(out)


def fit(model_fn: Callable[[int], Any] | str, budget: Any = None, *, device_memory: Any = None,
        reserve: Any = None, optimizer: str | int = "adam", solver: str = "auto", mode: str = "time",
        cost: str = DEFAULT_COST, dtype: torch.dtype | None = None, start: int = 1, cap: int = 2**20,
        vary: str = "batch", name: str | None = None) -> Fit:
    """The largest size ``n`` whose training step ``model_fn(n) -> (model, example_inputs)``
    fits ``budget`` (or ``device_memory``), vanilla and with remat (see the module docstring).

    ``model_fn`` may also be a target name as the CLI takes it (a zoo network, ``pkg.mod:fn``
    or ``hf:NAME``); ``vary`` then names the argument varied (``batch``, ``seq_len``) and
    labels the result.
    """
    from . import progress
    from .optimize import candidates, plan_within, smallest_choice, vanilla_peak
    from .report import time_ratio
    from .explain import forward_cost

    if budget is None and device_memory is None:
        raise BudgetError("fit needs a budget (bytes or a size: 24GiB) or device_memory (a device such as H100, "
                          "or its memory: 80GiB)")
    if mode not in ("time", "memory"):
        raise InputError(f"mode must be 'time' or 'memory', got {mode!r}")
    candidates(solver)
    if not (isinstance(start, int) and isinstance(cap, int) and 1 <= start <= cap):
        raise InputError(f"start and cap must be ints with 1 <= start <= cap, got start={start!r}, cap={cap!r}")
    if isinstance(model_fn, str):
        name = name or model_fn
        model_fn = builder(model_fn, vary)
    elif not callable(model_fn):
        raise InputError(f"model_fn must be a function n -> (model, example_inputs) or a target name, "
                         f"got {type(model_fn).__name__}")
    name = name or getattr(model_fn, "__name__", "model")
    cap = min(cap, getattr(model_fn, "max_n", cap))
    start = min(start, cap)
    given = absolute_budget(budget) if budget is not None else None
    device_name, memory = device_bytes(device_memory) if device_memory is not None else (None, None)
    if memory is None:
        held_back = 0.0
    elif reserve is None:
        held_back = float(DEFAULT_RESERVE)
    else:
        held_back = absolute_budget(reserve, "reserve", allow_zero=True)
    states = optimizer_states(optimizer)
    started = time.perf_counter()
    probes: dict[int, Probe] = {}
    graphs: dict[int, Graph] = {}

    with progress.task(f"fit {name}: largest {vary}") as bar:
        def probe(n: int) -> Probe:
            if n in probes:
                return probes[n]
            t0 = time.perf_counter()
            bar.note(f"{vary} {n}: tracing on fake tensors")
            model, inputs = build_on_meta(model_fn, n, dtype)
            st = state_bytes(model, inputs, states)
            graph = trace_graph(model, inputs, name=f"{name}@{vary}={n}", cost=cost)
            del model, inputs
            limit = math.inf if given is None else given
            if memory is not None:
                limit = min(limit, memory - held_back - st.total)
            graphs[n] = graph
            probes[n] = Probe(n=n, nodes=len(graph), budget=limit, vanilla_peak=vanilla_peak(graph),
                              state=asdict(st), seconds=time.perf_counter() - t0)
            return probes[n]

        def vanilla_excess(n: int) -> float:
            p = probe(n)
            return p.vanilla_peak - p.budget

        def remat_excess(n: int) -> float:
            p = probe(n)
            if p.remat_floor is None:
                bar.note(f"{vary} {n}: smallest peak of {solver}'s plans")
                c = smallest_choice(graphs[n], solver, mode)
                p.remat_floor = math.inf if c is None else c.peak
            return p.remat_floor - p.budget

        v_points: dict[int, float] = {}
        n_vanilla = largest(vanilla_excess, start=start, cap=cap, points=v_points)
        r_points: dict[int, float] = {}
        if n_vanilla and remat_excess(n_vanilla) <= 0:
            r_points[n_vanilla] = remat_excess(n_vanilla)
            below = [n for n in v_points if n < n_vanilla]
            if below:  # a second size remat fits at: the search extrapolates from the two
                r_points[max(below)] = remat_excess(max(below))
            n_remat = largest(remat_excess, start=start, cap=cap, lo=n_vanilla, points=r_points)
        else:
            n_remat = largest(remat_excess, start=start, cap=cap, points=r_points)
        remat_peak = ratio = chosen = None
        if n_remat:
            bar.note(f"{vary} {n_remat}: planning at the budget")
            p = probe(n_remat)
            g = graphs[n_remat]
            choice = plan_within(g, p.budget, solver, mode)
            remat_peak = choice.peak
            ratio = time_ratio(choice.recompute_cost, forward_cost(g))
            chosen = choice.plan.stats.get("chosen", choice.plan.solver)
    last = probes.get(n_remat) or probes.get(n_vanilla) or probes[max(probes)]
    return Fit(name=name, vary=vary, budget=given, device=device_name, device_memory=memory, reserve=held_back,
               optimizer_states=states, solver=solver, vanilla=n_vanilla, remat=n_remat,
               vanilla_peak=probes[n_vanilla].vanilla_peak if n_vanilla else None, remat_peak=remat_peak,
               remat_budget=probes[n_remat].budget if n_remat else None, time_ratio=ratio, chosen=chosen,
               capped=n_remat >= cap, cap=cap, state=last.state,
               probes=[probes[n] for n in sorted(probes)], seconds=time.perf_counter() - started)


# ---- targets by name (the CLI's MODEL) -----------------------------------------------------------------

def builder(target: str, vary: str = "batch", fixed: dict[str, Any] | None = None) -> Callable[[int], Any]:
    """``n -> (model, inputs)`` for a target name: a zoo network (``resnet50``; ``vary`` is passed
    to ``zoo.build``: ``batch``, or ``seq_len`` for ``transformer``), ``package.module:callable``
    (called with ``vary=n`` and ``fixed``; ``n=None``: without it) or ``hf:NAME`` (a Hugging Face causal LM from its
    config alone, random weights on meta: ``hf:gpt2``, or a local directory with config.json;
    ``vary`` is ``batch`` or ``seq_len``)."""
    fixed = dict(fixed or {})
    if target.startswith("hf:"):
        return _hf_builder(target[3:], vary, fixed)
    if ":" in target:
        mod, _, fn = target.partition(":")
        try:
            make = getattr(importlib.import_module(mod), fn)
        except (ImportError, AttributeError) as e:
            raise InputError(f"cannot load {target!r}: {e}; give package.module:callable") from None
        return lambda n: make(**({} if n is None else {vary: n}), **fixed)
    from . import zoo

    if target not in zoo.names():
        raise InputError(f"unknown model {target!r}: give a zoo name ({', '.join(zoo.names())}), "
                         f"package.module:callable or hf:NAME")
    return lambda n: zoo.build(target, device="meta", **({} if n is None else {vary: n}), **fixed)


def _hf_builder(name: str, vary: str, fixed: dict[str, Any]) -> Callable[[int], Any]:
    if vary not in ("batch", "seq_len"):
        raise InputError(f"hf: models vary batch or seq_len, got {vary!r}")
    try:
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        raise InputError("hf: models need the transformers package (pip install transformers)") from None
    transformers.utils.logging.set_verbosity_error()
    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"cannot load the config of hf:{name} ({first[:200]}); give a model name the Hugging Face "
                         f"cache has, or a local directory with config.json") from None
    positions = next((getattr(config, k) for k in ("max_position_embeddings", "n_positions")
                      if isinstance(getattr(config, k, None), int)), 1024)
    seq = int(fixed.pop("seq_len", min(positions, 2048)))
    batch = int(fixed.pop("batch", 1))
    vocab = int(getattr(config, "vocab_size", 32000))

    def make(n: int | None) -> tuple[nn.Module, dict[str, Any]]:
        b, s = (batch, seq) if n is None else ((n, seq) if vary == "batch" else (batch, n))
        model = AutoModelForCausalLM.from_config(config)
        ids = torch.randint(0, vocab, (b, s))
        return model, {"input_ids": ids, "labels": ids, "use_cache": False}

    if vary == "seq_len":
        make.max_n = positions  # type: ignore[attr-defined]  # position embeddings end there
    return make
