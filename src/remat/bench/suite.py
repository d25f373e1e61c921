"""The two suites (``quick``, ``paper``) and the run that writes their results.

A ``Suite`` is plain configuration; ``run_suite`` runs each section, writes one JSON per section
(each with the machine and the exact command, ``remat.machine.provenance``), the plots and the
Markdown report, and returns what it wrote. Sections report progress through a callback (the
CLI shows it with rich). ``networks=`` restricts every section to a subset (tests, quick looks).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ..errors import InputError
from . import measured, plots, report, tables
from .measured import Size, Timing, Tools
from .tables import Method

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Suite:
    name: str
    table1_networks: tuple[str, ...]
    exact_networks: tuple[str, ...] | None          # None: dp-exact on every network
    measured_sizes: tuple[tuple[str, Size], ...]    # Table 1 measured: network, batch, image
    measured_methods: tuple[tables.Method, ...]
    measured_peaks: tuple[str, ...]                 # "tracker" (remat.measure) and/or "profiler"
    seed003_networks: tuple[str, ...]
    seed004_depths: tuple[tuple[str, tuple[int, ...]], ...]
    seed004_transformer: tuple[tuple[str, dict[str, Any]], ...]
    tradeoff_networks: tuple[str, ...]              # predicted sweep on the paper graphs
    fractions: tuple[float, ...]
    measured_tradeoff: tuple[tuple[str, Size], ...]
    measured_solvers: tuple[str, ...]
    measured_fractions: tuple[float, ...]
    compile_budgets: tuple[float, ...]
    sweep_solvers: tuple[str, ...] | None = None    # None: every training solver but the slow ones
    timing: Timing = field(default_factory=Timing)
    device: str = "cpu"                             # where measured sections run: "cpu" or "cuda"

    @property
    def allocator(self) -> str:
        """The allocator-level measurement method of this suite's device (measured.ALLOCATOR)."""
        return measured.ALLOCATOR[self.device.split(":")[0]]

    def only(self, networks: tuple[str, ...]) -> "Suite":
        """The same suite restricted to ``networks`` (seed 004's depth families are kept)."""
        keep = set(networks)
        pick = lambda xs: tuple(x for x in xs if (x[0] if isinstance(x, tuple) else x) in keep)  # noqa: E731
        return replace(self, table1_networks=pick(self.table1_networks),
                       measured_sizes=pick(self.measured_sizes), seed003_networks=pick(self.seed003_networks),
                       tradeoff_networks=pick(self.tradeoff_networks),
                       measured_tradeoff=pick(self.measured_tradeoff),
                       seed004_transformer=self.seed004_transformer if "transformer" in keep else ())


# section name -> the Suite fields that make it run (emptied to leave the section out)
SECTION_FIELDS: dict[str, tuple[str, ...]] = {
    "table1_predicted": ("table1_networks",), "table1_measured": ("measured_sizes",),
    "seed003": ("seed003_networks",), "seed004": ("seed004_depths", "seed004_transformer"),
    "tradeoff_predicted": ("tradeoff_networks",), "tradeoff_measured": ("measured_tradeoff",),
}


def sections_only(suite: Suite, names: tuple[str, ...]) -> Suite:
    """``suite`` running only the sections ``names`` (keys of SECTION_FIELDS)."""
    unknown = [n for n in names if n not in SECTION_FIELDS]
    if unknown:
        raise InputError(f"unknown section(s) {unknown}: choose from {', '.join(SECTION_FIELDS)}")
    drop = {f: () for n, fields in SECTION_FIELDS.items() if n not in names for f in fields}
    return replace(suite, **drop)


PAPER_NETWORKS = ("pspnet", "unet", "resnet50", "resnet152", "vgg19", "densenet161", "googlenet")

SUITES: dict[str, Suite] = {
    "quick": Suite(
        name="quick",
        table1_networks=PAPER_NETWORKS,
        exact_networks=("vgg19", "unet", "resnet50"),
        measured_sizes=(("resnet50", Size(2, 64)),),
        measured_methods=tuple(m for m in measured.MEASURED_METHODS if m.label != "reforward"),
        measured_peaks=("tracker", "profiler"),
        seed003_networks=("vgg19", "resnet50", "resnet152", "densenet121", "customnet"),
        seed004_depths=(("resnet", (18, 34, 50, 101)), ("ffn", (4, 8, 16, 32, 64))),
        seed004_transformer=(("base, 2 layers, 64 tokens", {"layers": 2, "seq_len": 64}),),
        tradeoff_networks=("resnet50",),
        fractions=(0.3, 0.5, 0.7, 1.0),
        sweep_solvers=("none", "chen-sqrt", "chen-greedy", "dp-approx", "dp-exact", "reforward",
                       "twremat", "greedy"),
        measured_tradeoff=(("resnet18", Size(4, 64)),),
        measured_solvers=("dp-approx", "twremat"),
        measured_fractions=(0.4, 0.6, 0.8),
        compile_budgets=(0.5, 0.1),
        timing=Timing(repeats=9, warmup=2),
    ),
    "paper": Suite(
        name="paper",
        table1_networks=PAPER_NETWORKS,
        exact_networks=None,
        measured_sizes=tuple((n, Size(8, 224)) for n in ("resnet50", "resnet152", "vgg19", "densenet161",
                                                          "googlenet"))
        + (("unet", Size(1, 572)), ("pspnet", Size(2, 321))),  # batch norm after 1x1 pooling needs 2
        measured_methods=measured.MEASURED_METHODS + (Method("exact-tc", "dp-exact", "time"),
                                                      Method("exact-mc", "dp-exact", "memory"))
        + measured.SCHEDULE_METHODS,
        measured_peaks=("tracker", "profiler"),
        seed003_networks=("alexnet", "vgg11", "vgg13", "vgg16", "vgg19", "resnet18", "resnet34", "resnet50",
                          "resnet101", "resnet152", "densenet121", "densenet161", "densenet169",
                          "densenet201", "inception_v3", "customnet"),
        seed004_depths=(("resnet", (18, 34, 50, 101, 152, 200)), ("ffn", (10, 20, 40, 60, 80, 100))),
        seed004_transformer=(("base", {"size": "base"}), ("big", {"size": "big"})),
        tradeoff_networks=PAPER_NETWORKS,
        fractions=(0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0),
        measured_tradeoff=(("resnet50", Size(8, 224)), ("vgg19", Size(8, 224)), ("densenet161", Size(8, 224))),
        measured_solvers=("dp-approx", "chen-greedy", "reforward", "twremat", "greedy", "auto"),
        measured_fractions=(0.3, 0.5, 0.7),
        compile_budgets=(0.8, 0.5, 0.3, 0.1),
        timing=Timing(repeats=7, warmup=2),
    ),
}
# The papers' own batch and image sizes, measured on a GPU (CUDA allocator peaks): what the CPU
# cannot run in reasonable time, U-Net at 572 px and PSPNet at 713 px among them.
SUITES["gpu"] = replace(
    SUITES["paper"], name="gpu", device="cuda",
    measured_sizes=tuple((n, Size(batch, size)) for n, batch, size in (
        ("unet", 8, 572), ("vgg19", 64, 224), ("resnet50", 96, 224), ("pspnet", 2, 713),
        ("resnet152", 48, 224), ("densenet161", 32, 224), ("googlenet", 256, 224))),
    measured_peaks=("cuda", "tracker"),
    measured_tradeoff=(("resnet50", Size(96, 224)), ("vgg19", Size(64, 224)), ("densenet161", Size(32, 224))),
    measured_solvers=("dp-approx", "chen-greedy", "reforward", "twremat", "auto"),
    timing=Timing(repeats=9, warmup=2),
)


def write_json(path: Path, section: str, rows: Any, header: dict[str, Any], **extra: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**header, "section": section, **extra, "rows": rows}, indent=1, default=str))
    return path


def run_suite(suite: Suite, out: Path, header: dict[str, Any], tools: Tools | None = None,
              graph_fn: Callable[..., Any] | None = None, progress: Progress = lambda _: None) -> dict[str, Any]:
    """Run every section of ``suite``; write JSON, plots and report.md under ``out``."""
    from remat import zoo

    tools = tools or Tools.default(suite.device)
    graph_fn = graph_fn or zoo.graph
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {"suite": suite.name, "sections": {}, "plots": {}}
    sections = results["sections"]

    def section(name: str, rows: Any, **extra: Any) -> None:
        write_json(out / f"{name}.json", name, rows, header, **extra)
        sections[name] = rows

    if suite.table1_networks:
        rows = tables.table1_predicted(suite.table1_networks, graph_fn, exact_networks=suite.exact_networks,
                                       progress=progress)
        section("table1_predicted", rows, figures="PREDICTED at the paper's batch: remat.zoo.graph, "
                "simulated liveness peak and eq. (2) peak; bytes")
        results["plots"]["table1_predicted"] = plots.reductions(rows, out / "table1_predicted.png")
    if suite.measured_sizes:
        nets = tuple(n for n, _ in suite.measured_sizes)
        figures = (f"MEASURED on {suite.device}: storage_peak = live-storage tracking (remat.measure), "
                   + ("cuda_peak = torch.cuda.max_memory_allocated over the step" if suite.allocator == "cuda"
                      else "profiler_peak = torch.profiler allocator replay")
                   + "; bytes; time_ratio = median of per-round ratios to vanilla, round-robin")
        rows = measured.table1_measured(nets, dict(suite.measured_sizes), tools, suite.measured_methods,
                                        timing=suite.timing, peaks=suite.measured_peaks, progress=progress,
                                        checkpoint=lambda rows: section("table1_measured", rows, figures=figures))
        section("table1_measured", rows, figures=figures)
        kind = suite.allocator if suite.allocator in suite.measured_peaks else "storage"
        results["plots"]["table1_measured"] = plots.reductions(
            rows, out / "table1_measured.png", key=f"reduction_{kind}",
            title=f"Seed 000 Table 1 methods, MEASURED on {suite.device} ({kind} method): memory reduction")
    if suite.seed003_networks:
        t1, t2 = tables.seed003_tables(suite.seed003_networks, graph_fn, progress=progress)
        section("seed003_table1", t1, figures="PREDICTED (simulated liveness), the paper's batch")
        section("seed003_table2", t2, figures="solver seconds on this machine; cut-offs PREDICTED")
        results["plots"]["seed003"] = plots.reductions(
            t1, out / "seed003_table1.png", title="Seed 003 Table 1, PREDICTED (simulated liveness): memory cut")
    if suite.seed004_depths:
        rows = tables.seed004_depth(dict(suite.seed004_depths), graph_fn, progress=progress)
        section("seed004_depth", rows, figures="PREDICTED: M(σ) of the schedule problem on the joint graph; bytes")
        results["plots"]["seed004_depth"] = plots.depth(rows, out / "seed004_depth.png")
    if suite.seed004_transformer:
        rows = tables.seed004_transformer(dict(suite.seed004_transformer), graph_fn, progress=progress)
        section("seed004_transformer", rows, figures="PREDICTED: M(σ) on the joint graph; bytes")
    sweep = {}
    for net in suite.tradeoff_networks:
        g = graph_fn(net)
        sweep[net] = tables.tradeoff_predicted(g, suite.fractions, suite.sweep_solvers, progress=progress)
        results["plots"][f"tradeoff_{net}_predicted"] = plots.tradeoff(
            sweep[net], out / f"tradeoff_{net}_predicted.png", measured=False)
    if sweep:
        section("tradeoff_predicted", [r for rows in sweep.values() for r in rows],
                figures="PREDICTED at the paper's batch; budget = fraction x vanilla simulated peak")
    measured_sweep: list[dict[str, Any]] = []
    for net, size in suite.measured_tradeoff:
        rows = measured.tradeoff_measured(net, size, tools, suite.measured_solvers, suite.measured_fractions,
                                          suite.compile_budgets, timing=suite.timing, progress=progress,
                                          allocator=suite.allocator)
        measured_sweep += rows
        results["plots"][f"tradeoff_{net}_measured"] = plots.tradeoff(
            rows, out / f"tradeoff_{net}_measured.png", measured=True)
        # written after each network, so that a run stopped later keeps what it measured
        section("tradeoff_measured", measured_sweep, figures=f"MEASURED on {suite.device}, {suite.allocator} "
                "method; memory_ratio and time_ratio against vanilla in the same run")
        write_json(out / "peers_equal_peak.json", "peers_equal_peak", report.peers_at_equal_peak(measured_sweep),
                   header, figures="from tradeoff_measured: remat's fastest plan at or below each peer's "
                   f"measured peak ({suite.allocator} method, 1% slack)")
    results["seconds"] = time.perf_counter() - started
    results["report"] = report.write(out / "report.md", suite.name, sections, results["plots"], header,
                                     results["seconds"])
    write_json(out / "results.json", "summary", report.headline(sections), header,
               suite=suite.name, seconds=results["seconds"],
               files=sorted(p.name for p in out.iterdir()))
    return results
