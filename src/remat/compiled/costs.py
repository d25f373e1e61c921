"""What one op of a joint graph costs, for the planner: ``cost="flops" | "roofline" | "profile"``.

- ``"flops"``: ``torch.utils.flop_counter``'s formulas on the fake values (one flop per output
  element where there is none; attention on the CPU included). Unitless: it ranks matmuls and
  convolutions above everything else, and a memory-bound op costs next to nothing.
- ``"roofline"``: seconds, max(FLOPs / peak FLOP/s, bytes moved / memory bandwidth) plus a
  per-op overhead, with the device's figures (``device_figures``: known GPUs by name; on the CPU
  figures measured once with matmuls, a copy, a one-element add and per-kind rates, each its
  fastest run over rounds spanning a second on a thread of its own, cached on disk). Where the
  graph's values are on a device, the ops that decide a plan's time are timed there as
  ``"profile"`` times them: convolutions and batch norms, whose kernels run far from it at small
  shapes (``TIMED``), and every op it prices at ``TIME_FROM`` or more (``timed_here``).
- ``"profile"``: seconds, each distinct (op, input shapes, strides, dtypes, non-tensor
  arguments) timed once on real tensors on the device (its fastest run of those that fit in
  ``TIME_WINDOW``, at least ``REPEATS``, after a warm-up: ``_op_seconds``) and cached on disk,
  so a second build of the same model times nothing. Ops that cannot be run on synthetic inputs
  (random draws, in-place ops, ops that fail) get their roofline estimate.
- ``"paper"``: seed 000 §5's rule: 10 for a convolution, 1 for anything else.
- ``"auto"`` (the default): the one of these the cost benchmark found best on the graph's kind of
  device (``BEST``): ``"profile"`` on CUDA, ``"roofline"`` elsewhere and under several ranks
  (``resolve``).

The cache: ``$REMAT_CACHE_DIR`` (default ``~/.cache/remat``), one JSON file per device name, torch
version (and, on the CPU, thread count, which op times depend on).
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from ..errors import InputError
from ..graph import Graph

COSTS = ("auto", "flops", "roofline", "profile", "paper")
# "auto", the default: the cost model whose plans trained fastest at matched measured peaks in
# bench/bench_costs.py on that kind of device (``BEST``). On this project's 2-core CPU, roofline
# (mean step 1.137x vanilla over three runs, against 1.163x with FLOP costs and 1.168x profiled;
# bench/results/costs_cpu). On an H200 under bf16 autocast (GPT-2 12x768 and Mistral 8x1024 at
# 70% and 50%; bench/results/costs_cuda_h200_3dd9cdf), profile: 1.043x, against 1.086x with FLOP
# costs and 1.094x with the roofline (Mistral 1.044x / 1.131x / 1.143x; GPT-2 1.042x / 1.041x /
# 1.044x), its planning no slower (7.0-8.7 s against 6.9-12.1 s, ops timed included).
DEFAULT_COST = "auto"
BEST = {"cuda": "profile"}  # device type -> cost model; any other device: "roofline"
SECONDS = frozenset({"auto", "roofline", "profile"})  # the cost models whose costs are seconds on the device

# ops the flop counter has no formula for that do matmul work (batch, heads, queries, keys, dim)
_ATTENTION = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")

# peak dense throughput (FLOP/s; "flops32": fp32 without tensor cores), memory bandwidth (B/s),
# per-op overhead (s: kernel launch, dispatcher) and, where the device does some work slower than
# it moves the bytes, that work's rate (elements per second: ``rated``) of known devices; the
# CPU's are replaced by measured ones where measuring works (``calibrate``)
DEVICES: dict[str, dict[str, float]] = {
    "cpu": {"flops": 1.0e11, "bandwidth": 2.0e10, "overhead": 4e-6, "draws": 1.5e8, "tanh": 4e8, "exp": 1.2e9,
            "erf": 2e9, "sigmoid": 2e9, "pool": 2.5e8},
    "H100": {"flops": 4.0e14, "flops32": 5.0e13, "bandwidth": 3.0e12, "overhead": 4e-6},
    "H200": {"flops": 4.0e14, "flops32": 5.0e13, "bandwidth": 4.5e12, "overhead": 4e-6},
    "A100": {"flops": 2.5e14, "flops32": 1.5e13, "bandwidth": 1.8e12, "overhead": 4e-6},
    "cuda": {"flops": 1.0e14, "flops32": 1.5e13, "bandwidth": 1.0e12, "overhead": 4e-6},
}

FIGURES_VERSION = 4  # what a cached CPU calibration must have been measured with (bf16 matmul, rates, fastest runs)
CALIBRATION_SECONDS = 1.0  # what the CPU's calibration spans at least, in rounds over all its measures
CALIBRATION_ROUNDS = 5      # ... and how many rounds at least
REPEATS = 5          # timed runs per op at least (after one warm-up) ...
TIME_WINDOW = 0.01   # ... and as many more as fit in this many seconds (at most MAX_REPEATS): its fastest is its cost
MAX_REPEATS = 200
LONG_OP = 0.05       # seconds: an op this slow in its warm-up is timed once more only
TIMING = 2           # how cached op seconds were measured (1: median of five); a cache of another is timed again

timed = 0            # ops timed on real tensors in this process (tests count cache hits by it)


def check(cost: str) -> None:
    """Refuse an unknown cost model, naming the known ones."""
    if cost not in COSTS:
        raise InputError(f"unknown cost {cost!r}: use one of {', '.join(repr(c) for c in COSTS)}")


def resolve(cost: str, device: Any = None) -> str:
    """The cost model ``cost`` names on ``device``: ``"auto"`` is ``BEST``'s for its kind of device
    (``"roofline"`` where there is none, or no device is known); any other name is itself.

    Under ``torch.distributed`` with more than one rank, ``"auto"`` is the roofline everywhere:
    profiled times differ between ranks by noise, so ranks could pick different plans (each exact,
    each within its budget, but the slowest sets a data-parallel step's time); the roofline plans
    the same on every rank. ``cost="profile"`` still times on each rank."""
    check(cost)
    if cost != "auto":
        return cost
    if _ranks() > 1:
        return "roofline"
    kind = torch.device(device).type if device is not None else None
    return BEST.get(kind, "roofline")


def _ranks() -> int:
    """The world size of an initialized default process group, else 1."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


# ---- fake values -----------------------------------------------------------------------------


def _tensors(val: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(val) if isinstance(t, torch.Tensor)]


def op_name(target: Any) -> str:
    return str(getattr(target, "__name__", target)).replace("aten::", "")


def node_device(n: fx.Node) -> torch.device | None:
    """The device an op runs on: that of its output (or inputs) in the fake values, if any."""
    for t in _tensors(n.meta.get("val")) + [t for a in n.all_input_nodes for t in _tensors(a.meta.get("val"))]:
        if t.device.type != "meta":
            return t.device
    return None


# ---- flops and bytes -------------------------------------------------------------------------


def flops(n: fx.Node) -> float:
    """FLOPs of one op from its fake values (torch.utils.flop_counter's formulas)."""
    from torch.utils.flop_counter import flop_registry

    out = n.meta.get("val")
    numel = sum(t.numel() for t in _tensors(out))
    name = op_name(n.target)
    if any(name.startswith(a) for a in _ATTENTION):
        q, k = n.args[0].meta["val"], n.args[1].meta["val"]
        b, h, s_q, d = q.shape[-4:] if q.dim() >= 4 else (1, *q.shape[-3:])
        s_k = k.shape[-2]
        return float(max(4 * b * h * s_q * s_k * d, numel))
    packet = getattr(n.target, "overloadpacket", None)
    fn = flop_registry.get(packet) if packet is not None else None
    if fn is not None:
        args = pytree.tree_map_only(fx.Node, lambda a: a.meta.get("val"), n.args)
        kwargs = pytree.tree_map_only(fx.Node, lambda a: a.meta.get("val"), n.kwargs)
        try:
            return float(max(fn(*args, **kwargs, out_val=out), numel))
        except Exception:  # noqa: BLE001 - a formula that cannot read these arguments: count elements
            pass
    return float(numel)


def bytes_moved(n: fx.Node) -> float:
    """Bytes an op reads and writes: its tensor inputs and outputs (a training batch norm reads its
    input twice: once for the batch statistics, once to normalize)."""
    total = sum(t.numel() * t.element_size() for t in _tensors(n.meta.get("val")))
    for a in n.all_input_nodes:
        total += sum(t.numel() * t.element_size() for t in _tensors(a.meta.get("val")))
    name = op_name(n.target)
    if name.startswith("_native_batch_norm_legit") and n.args:
        training = 3 if name.endswith("no_stats") else 5
        if len(n.args) > training and n.args[training] is True and isinstance(n.args[0], fx.Node):
            total += sum(t.numel() * t.element_size() for t in _tensors(n.args[0].meta.get("val")))
    return float(total)


# ---- roofline --------------------------------------------------------------------------------


def device_figures(device: Any = None) -> dict[str, float]:
    """Peak FLOP/s, bandwidth and per-op overhead of ``device`` (a torch.device, "cpu", "cuda"):
    a known GPU by its name; the CPU's as measured here (``calibrate``), else ``DEVICES["cpu"]``."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return DEVICES["cuda"]
        label = torch.cuda.get_device_name(dev)
        return next((DEVICES[k] for k in ("H200", "H100", "A100") if k in label), DEVICES["cuda"])
    if dev.type == "cpu":
        return calibrate()
    return DEVICES["cpu"]


def roofline(n: fx.Node, device: Any = None, figures: dict[str, float] | None = None) -> float:
    """Seconds by the roofline model: max(flops / peak FLOP/s, bytes moved / bandwidth), plus the
    device's per-op overhead (what makes many small ops expensive). ``figures`` overrides the
    device's (``DEVICES`` entries); ``device`` defaults to where the op's fake values live."""
    fig = figures or device_figures(device if device is not None else node_device(n))
    wide = any(t.dtype == torch.float32 for t in _tensors(n.meta.get("val")))
    return seconds(fig, flops(n), bytes_moved(n), wide, rated(n))


def seconds(fig: dict[str, float], flops: float, moved: float, wide: bool = True,
            elements: tuple[str, float] | None = None) -> float:
    """The roofline of one op on a device's figures: max(flops / peak, bytes / bandwidth, elements
    / the device's rate for them) plus the per-op overhead. ``wide``: fp32 (``flops32`` where the
    device has faster low-precision units); ``elements``: (figure, count) of work the device does
    slower than it moves the bytes (``rated``), counted where the figures have that rate."""
    peak = fig.get("flops32", fig["flops"]) if wide else fig["flops"]
    t = max(flops / peak, moved / fig["bandwidth"])
    if elements is not None and fig.get(elements[0]):
        t = max(t, elements[1] / fig[elements[0]])
    return t + fig.get("overhead", 4e-6)


# pointwise ops whose elements cost a transcendental function, by the figure that rates it
_TRANSCENDENTAL = {"tanh": "tanh", "exp": "exp", "expm1": "exp", "exp2": "exp", "log": "exp", "log1p": "exp",
                   "log2": "exp", "_softmax": "exp", "_safe_softmax": "exp", "_log_softmax": "exp",
                   "_log_softmax_backward_data": "exp", "logsumexp": "exp", "erf": "erf", "erfc": "erf",
                   "gelu": "erf", "gelu_backward": "erf", "sigmoid": "sigmoid", "silu": "sigmoid",
                   "silu_backward": "sigmoid"}
_POOLING = ("max_pool2d_with_indices", "max_pool2d", "max_pool3d_with_indices", "avg_pool2d", "avg_pool3d")


def _window(n: fx.Node) -> int:
    """Input elements a pooling window reads: its kernel, clipped to the padded input (HF
    EfficientNet pools a 2x2 map with a 1280x1280 kernel, which read as written cost 113 s)."""
    x = n.args[0].meta.get("val") if isinstance(n.args[0], fx.Node) else None
    dims = 3 if "3d" in n.target.overloadpacket.__name__ else 2
    kernel = list(n.args[1]) * (dims if len(n.args[1]) == 1 else 1)
    if not isinstance(x, torch.Tensor) or x.dim() < dims:
        return math.prod(kernel)
    pad = n.args[3] if len(n.args) > 3 and isinstance(n.args[3], (list, tuple)) and n.args[3] else [0]
    pad = list(pad) * (dims if len(pad) == 1 else 1)
    return math.prod(min(k, s + 2 * p) for k, s, p in zip(kernel, x.shape[-dims:], pad))


def rated(n: fx.Node) -> tuple[str, float] | None:
    """Work of ``n`` a CPU does far slower than it moves the bytes: random numbers drawn
    (``"draws"``: 170M a second on this project's CPU, a dropout mask about 40 times its bytes'
    copy), transcendental functions (``"tanh"``, ``"exp"``, ``"erf"``, ``"sigmoid"``: 0.4-2.4G
    elements a second against 11G copied) and pooling windows (``"pool"``: output elements times
    the window, 260M a second: a ResNet's stem max pooling takes 1.1 ms where its bytes move in
    20 us). A GPU's figures have no such rates: there they are memory-bound."""
    if not isinstance(n.target, torch._ops.OpOverload):
        return None
    count = float(sum(t.numel() for t in _tensors(n.meta.get("val"))))
    if torch.Tag.nondeterministic_seeded in n.target.tags and _draws(n):
        return "draws", count
    name = n.target.overloadpacket.__name__
    if name in _POOLING and len(n.args) > 1 and isinstance(n.args[1], (list, tuple)):
        outs = _tensors(n.meta.get("val"))
        return "pool", float(outs[0].numel() * _window(n)) if outs else 0.0
    kind = _TRANSCENDENTAL.get(name)
    if kind == "erf" and n.kwargs.get("approximate") == "tanh":
        kind = "tanh"
    return (kind, count) if kind is not None else None


_calibrated: dict[str, dict[str, float]] = {}


def calibrate() -> dict[str, float]:
    """The CPU's figures at the current thread count, measured once (512x512 matmuls in fp32 and
    bf16, a 16 MiB copy, a one-element add, a dropout mask and four transcendental functions over
    256Ki elements, a 3x3 max pooling) and cached on disk beside the profiles."""
    cache = Cache(torch.device("cpu"))
    if str(cache.path) in _calibrated:
        return _calibrated[str(cache.path)]
    fig = cache.figures()
    if fig is None or fig.get("version") != FIGURES_VERSION:  # measured before the rates it has now
        try:
            fig = _on_a_thread_of_its_own(_measure_cpu)
        except Exception:  # noqa: BLE001 - a CPU nothing can be timed on: the nominal figures
            fig = dict(DEVICES["cpu"])
        cache.set_figures(fig)
        cache.save()
    _calibrated[str(cache.path)] = fig
    return fig


def _on_a_thread_of_its_own(fn: Callable[[], Any]) -> Any:
    """``fn()`` run on a new thread, at the caller's thread count: one that starts without the
    caller's thread-local state (the modes and dispatch keys AOTAutograd's tracing holds, grad mode),
    so that what it times is the device, not the context it was called from. Called inside inductor's
    partitioner, the CPU's per-op overhead had measured 4.5-6.9 us against 2.0-2.4 us on its own thread."""
    threads, out = torch.get_num_threads(), {}

    def run() -> None:
        torch.set_num_threads(threads)
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - raised again on the caller's thread
            out["error"] = e

    worker = threading.Thread(target=run, name="remat-calibrate")
    worker.start()
    worker.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _measure_cpu() -> dict[str, float]:
    """The CPU's figures, each from its measure's fastest run over rounds of all of them that span
    ``CALIBRATION_SECONDS`` (at least ``CALIBRATION_ROUNDS``): other work, and the machine's own slow
    spells, can only slow a run. On this project's 2-core host a whole calibration came out 20-30%
    slow now and then (a spell of up to a second, and the first second after idling), and a cached
    median of five had put its fp32 matmuls at 48.8 GFLOP/s where they run 95-104: a ViT's fc1
    matmul was priced at 1.40 ms and ran in 0.46-0.67."""
    with real_mode(), torch.no_grad():
        a, b = torch.rand(512, 512), torch.rand(512, 512)
        src = torch.rand(4 * 2 ** 20)  # 16 MiB
        dst = torch.empty_like(src)
        x, y = torch.rand(1), torch.rand(1)
        add = torch.ops.aten.add.Tensor
        elems, mask = torch.rand(2 ** 18) + 0.5, torch.empty(2 ** 18)
        image = torch.rand(8, 16, 32, 32)
        runs = {"mm": lambda: torch.mm(a, b), "copy": lambda: dst.copy_(src), "overhead": lambda: add(x, y),
                "draws": lambda: mask.bernoulli_(0.9), "tanh": lambda: torch.tanh(elems),
                "exp": lambda: torch.exp(elems), "erf": lambda: torch.erf(elems),
                "sigmoid": lambda: torch.sigmoid(elems),
                "pool": lambda: torch.ops.aten.max_pool2d_with_indices(image, [3, 3], [2, 2], [1, 1])}
        low = _low_precision_matmul(a, b)
        if low is not None:
            runs["low"] = low
        best = dict.fromkeys(runs, math.inf)
        started, rounds = time.perf_counter(), 0
        while rounds < CALIBRATION_ROUNDS or time.perf_counter() - started < CALIBRATION_SECONDS:
            for name, fn in runs.items():
                best[name] = min(best[name], _fastest_seconds(fn, 3 if name == "overhead" else 1))
            rounds += 1
    return {"flops": 2 * 512 ** 3 / best.get("low", best["mm"]), "flops32": 2 * 512 ** 3 / best["mm"],
            "bandwidth": 2 * src.numel() * 4 / best["copy"], "overhead": best["overhead"],
            **{k: elems.numel() / best[k] for k in ("draws", "tanh", "exp", "erf", "sigmoid")},
            "pool": 8 * 16 * 16 * 16 * 9 / best["pool"], "measured": 1.0, "version": FIGURES_VERSION}


def _fastest_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Seconds of ``fn``'s fastest run of ``repeats``, after a warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def _low_precision_matmul(a: torch.Tensor, b: torch.Tensor) -> Callable[[], Any] | None:
    """A bf16 matmul of ``a`` and ``b`` to time (None where the CPU cannot run one)."""
    try:
        a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
        torch.mm(a16, b16)
    except RuntimeError:
        return None
    return lambda: torch.mm(a16, b16)


# ---- profile ---------------------------------------------------------------------------------


def cache_dir() -> Path:
    return Path(os.environ.get("REMAT_CACHE_DIR") or Path.home() / ".cache" / "remat")


def device_name(device: torch.device) -> str:
    """A file-name-safe name of the device model (op times are per model, not per index)."""
    if device.type == "cuda" and torch.cuda.is_available():
        label = torch.cuda.get_device_name(device)
    elif device.type == "cpu":
        label = f"cpu-{_cpu_model()}-t{torch.get_num_threads()}"
    else:
        label = device.type
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_")


@functools.lru_cache(maxsize=None)
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


class Cache:
    """Op timings (seconds by key) of one device and torch version, in one JSON file (``kind``:
    what the numbers are; ``workspace`` keeps bytes in a file of its own)."""

    def __init__(self, device: torch.device, kind: str = "costs") -> None:
        self.path = cache_dir() / f"{kind}-{device_name(device)}-torch{torch.__version__}.json"
        self.timing = TIMING if kind == "costs" else None  # (op seconds timed another way are timed again)
        self.data: dict[str, Any] = {"ops": {}, "timing": self.timing}
        self.dirty = False
        try:
            loaded = json.loads(self.path.read_text())
            if isinstance(loaded, dict) and isinstance(loaded.get("ops"), dict):
                self.data = {**loaded, **self._ops_of(loaded), "timing": self.timing}
        except (OSError, ValueError):
            pass

    def _ops_of(self, data: dict[str, Any]) -> dict[str, dict[str, float]]:
        """``data``'s op entries where they were measured as this cache measures them, else none."""
        return {"ops": data.get("ops", {}) if data.get("timing") == self.timing else {}}

    @property
    def ops(self) -> dict[str, float]:
        return self.data["ops"]

    def figures(self) -> dict[str, float] | None:
        return self.data.get("figures")

    def set_figures(self, fig: dict[str, float]) -> None:
        self.data["figures"] = fig
        self.dirty = True

    def put(self, key: str, seconds: float) -> None:
        self.ops[key] = seconds
        self.dirty = True

    def save(self) -> None:
        """Write the file (merged with what another process wrote meanwhile); a cache that cannot
        be written is not an error: the next build times again."""
        if not self.dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                disk = json.loads(self.path.read_text())
            except (OSError, ValueError):
                disk = {}
            merged = {**disk, **self.data, "ops": {**self._ops_of(disk)["ops"], **self.ops}}
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(merged, indent=0, sort_keys=True))
            os.replace(tmp, self.path)
            self.dirty = False
        except OSError:
            pass


def op_key(n: fx.Node) -> str:
    """What an op's time depends on: the overload, its tensors' shapes, strides and dtypes, and
    its other arguments."""
    def describe(a: Any) -> Any:
        if isinstance(a, fx.Node):
            a = a.meta.get("val")
        if isinstance(a, torch.Tensor):
            return f"T{tuple(a.shape)}/{tuple(a.stride())}+{a.storage_offset()}/{str(a.dtype).replace('torch.', '')}"
        if isinstance(a, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return str(a)
        return a if isinstance(a, (int, float, bool, str, type(None))) else repr(a)

    args = pytree.tree_map(describe, (list(n.args), dict(n.kwargs)))
    return json.dumps([str(n.target), args], default=repr, separators=(",", ":"))


def unrunnable(n: fx.Node) -> str | None:
    """Why an op cannot be timed on synthetic inputs (None: it can)."""
    target = n.target
    if not isinstance(target, torch._ops.OpOverload):
        return "not an aten op"
    if torch.Tag.nondeterministic_seeded in target.tags and _draws(n):
        return "random"
    if target._schema.is_mutable:
        return "mutates its inputs"
    if not _tensors(n.meta.get("val")):
        return "no tensor output"
    return None


def _draws(n: fx.Node) -> bool:
    """Whether a seeded op draws random numbers here: attention draws only with ``dropout_p > 0``."""
    names = [a.name for a in n.target._schema.arguments]
    if "dropout_p" not in names:
        return True
    i = names.index("dropout_p")
    p = n.args[i] if i < len(n.args) else n.kwargs.get("dropout_p", n.target._schema.arguments[i].default_value)
    return not isinstance(p, (int, float)) or p > 0


def _real(val: Any, device: torch.device) -> Any:
    """A real tensor like a fake one (shape, strides, offset, dtype) on ``device``: floating values
    in [0.5, 1) (no NaN from logs or roots), integers and booleans zero (valid indices)."""
    if not isinstance(val, torch.Tensor):
        return val
    size = 1 + val.storage_offset() + sum((s - 1) * st for s, st in zip(val.shape, val.stride()) if s > 0)
    if val.numel() == 0:
        size = 0
    base = torch.zeros(size, dtype=val.dtype, device=device)
    if val.dtype.is_floating_point or val.dtype.is_complex:
        base.uniform_(0.5, 1.0)
    return base.as_strided(tuple(val.shape), tuple(val.stride()), val.storage_offset())


def real_mode() -> Any:
    """A context where tensors are real: the planner runs inside AOTAutograd's tracing, whose fake
    and proxy modes would otherwise make every tensor made here fake (and every timing a fake's)."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


def _op_seconds(fn: Callable[[], Any], device: torch.device) -> float:
    """Seconds of ``fn``'s fastest run of those that fit in ``TIME_WINDOW`` (at least ``REPEATS``, at
    most ``MAX_REPEATS``) after one warm-up run, synchronizing CUDA around each. Other work on the
    machine can only slow a run: on this project's 2-core host the median of five runs of one op
    (GPT-2's 512x4096 log-softmax: 1.16, 1.71 and 3.76 ms in three processes) varied by up to 4x
    between timings, and the plans made with them with it; the fastest in 10 ms, by at most 1.13x
    (bench/results/op_timing_cpu)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    started = time.perf_counter()
    fn()
    sync()
    if time.perf_counter() - started > LONG_OP:
        repeats, window = 1, 0.0
    else:
        repeats, window = REPEATS, TIME_WINDOW
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - began < window and len(times) < MAX_REPEATS):
        started = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - started)
    return min(times)


def time_op(n: fx.Node, device: torch.device) -> float:
    """Seconds of one run of ``n``'s op on real tensors like its fake inputs."""
    global timed
    with real_mode(), torch.no_grad():
        args = pytree.tree_map_only(fx.Node, lambda a: _real(a.meta.get("val"), device), n.args)
        kwargs = pytree.tree_map_only(fx.Node, lambda a: _real(a.meta.get("val"), device), n.kwargs)
        seconds = _op_seconds(lambda: n.target(*args, **kwargs), device)
    timed += 1
    return seconds


def profile(nodes: Iterable[fx.Node], device: Any = None, notes: list[str] | None = None,
            what: str = "cost='profile'") -> dict[fx.Node, float]:
    """Measured seconds of each op (see the module docstring); ``notes`` gets one line per kind of
    op that fell back to its roofline estimate, and a summary; ``what``: the progress line's."""
    from .. import progress

    nodes = list(nodes)
    out: dict[fx.Node, float] = {}
    caches: dict[str, Cache] = {}
    fallback: dict[str, str] = {}
    hits = runs = 0
    with progress.task(f"timing ops ({what})", total=len(nodes)) as bar:
        for n in nodes:
            # where the op really runs (a CPU scalar op in a CUDA model stays on the CPU)
            dev = node_device(n) or (torch.device(device) if device is not None else torch.device("cpu"))
            cache = caches.setdefault(str(dev), Cache(dev))
            why = unrunnable(n)
            key = op_key(n) if why is None else None
            if key is not None and key in cache.ops:
                out[n] = cache.ops[key]
                hits += 1
            elif why is None:
                bar.note(op_name(n.target))
                try:
                    out[n] = time_op(n, dev)
                    cache.put(key, out[n])
                    runs += 1
                except Exception as e:  # noqa: BLE001 - fails on synthetic inputs: estimated instead
                    why = f"failed on synthetic inputs ({type(e).__name__})"
            if why is not None:
                out[n] = roofline(n, dev)
                fallback.setdefault(op_name(n.target), why)
            bar.advance()
    for cache in caches.values():
        cache.save()
    if notes is not None:
        notes.append(f"profile: {runs} ops timed, {hits} from the cache, {sum(1 for _ in fallback)} kinds of op "
                     f"estimated by the roofline")
        notes += [f"profile: {name} estimated by the roofline: {why}" for name, why in sorted(fallback.items())]
    return out


# ---- dispatch --------------------------------------------------------------------------------


def paper(n: fx.Node) -> float:
    return 10.0 if "convolution" in op_name(n.target) else 1.0


def node_costs(nodes: Iterable[fx.Node], cost: str, device: Any = None,
               notes: list[str] | None = None) -> dict[fx.Node, float]:
    """The cost of each op by the ``cost`` model (one of ``COSTS``; ``"auto"`` resolved on the
    device the ops' values are on, else ``device``)."""
    nodes = list(nodes)
    cost = resolve(cost, next(filter(None, map(node_device, nodes)), device))
    if cost == "profile":
        return profile(nodes, device, notes)
    out = {n: _cost(n, cost, device) for n in nodes}
    if cost == "roofline":
        timed = [n for n in nodes if timed_here(n, out[n])]
        if timed:
            out.update(profile(timed, device, what="the slowest ops, cost='roofline'"))
            if notes is not None:
                notes.append(f"roofline: convolutions, batch norms and ops it prices at {TIME_FROM * 1e6:.0f} us or "
                             f"more timed on the device ({len(timed)} ops; their kernels' speed varies with shape "
                             "far from the roofline's)")
    return out


# ops the roofline mis-rates by their shape: on the CPU a small-channel oneDNN convolution takes
# 70-100 us whatever its FLOPs (the roofline said 7-30 us: 5.6x under in bf16, 2.1x in fp32, on
# the held-out ResNet), a training batch norm 3.4x its bytes' time. Under ``"roofline"`` these are
# timed once per shape on the device (as ``"profile"`` times every op) where the graph's values
# are on one; few distinct shapes in a network, and the times are cached on disk.
TIMED = frozenset({"convolution", "_convolution", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                   "_native_batch_norm_legit_no_training", "native_batch_norm", "cudnn_batch_norm",
                   "miopen_batch_norm"})


# seconds: under ``"roofline"``, an op priced at this or more is timed on the device too. The roofline's
# peak rates hold for large kernels only: on this project's CPU it priced the held-out models' bf16
# matmuls 1.07-1.65x under their time, fused attention 2.5-3.4x, layer norm 3.2x, softmax 2.65x,
# and gelu 2.5x over (bench/results/timed_attention_cpu/op_kinds.log). A planner that prices one of
# these kinds right and its neighbours wrong trades them badly (timing only attention and layer
# norms made 2 of 6 changed plans dearer); timing every op that costs 10 us or more leaves the
# roofline only ops whose errors are a few microseconds each. On the 18 eager plans of the CPU-size
# held-out models, predicted recomputation went from 0.53-1.0x of the same ops timed to 0.97-1.0x,
# and the plans' timed recomputation from 95.1 to 91.9 ms in all (bench/results/timed_heavy_cpu).
TIME_FROM = 1e-5


def timed_kind(n: fx.Node) -> bool:
    """Whether the roofline takes ``n``'s time measured whatever its price (``TIMED``)."""
    packet = getattr(n.target, "overloadpacket", None)
    return packet is not None and packet.__name__ in TIMED


def timed_here(n: fx.Node, price: float) -> bool:
    """Whether the roofline takes ``n``'s time (priced ``price`` by it) measured: a ``TIMED`` kind or
    an op priced at ``TIME_FROM`` or more, where its values are on a device to time it on."""
    return (timed_kind(n) or price >= TIME_FROM) and node_device(n) is not None


def _cost(n: fx.Node, cost: str, device: Any = None) -> float:
    """One op's cost (``"profile"``: from the cache, timing it if absent)."""
    if cost == "roofline":
        return roofline(n, device)
    if cost == "flops":
        return flops(n)
    if cost == "paper":
        return paper(n)
    if cost == "profile":
        return profile([n], device)[n]
    return _cost(n, resolve(cost, node_device(n) or device), device)


def total_cost(g: Graph) -> float:
    """Cost of one forward: the yardstick recompute costs are reported against."""
    return math.fsum(g[v].cost for v in g.order)


__all__ = ["BEST", "COSTS", "DEFAULT_COST", "DEVICES", "SECONDS", "Cache", "bytes_moved", "calibrate", "check",
           "device_figures", "flops", "node_costs", "op_key", "profile", "resolve", "roofline", "time_op", "timed_here",
           "timed_kind", "total_cost"]
