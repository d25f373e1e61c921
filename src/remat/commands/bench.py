"""``remat bench [--suite quick|paper|gpu] [--out DIR]``: the papers' tables, predicted and measured.

Writes one JSON per section (machine and exact command in each), PNG plots and report.md into
--out, by default a new folder remat-bench/SUITE-DATE-TIME/ in the current directory (results
already there are never overwritten). quick takes a few minutes on a laptop CPU; paper is the
full run, by hand; gpu is paper with its measured sections on CUDA at the papers' own batch and
image sizes (CUDA allocator peaks). --networks restricts every section to some networks.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from .. import progress
from ..errors import InputError
from ._output import emit_json, seconds, size, table, text

NAME = "bench"
HELP = "run the benchmark suite: the papers' tables, predicted and measured, with the peers"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", choices=["quick", "paper", "gpu"], default="quick")
    p.add_argument("--out", default=None,
                   help="output folder (default: a new folder remat-bench/SUITE-DATE-TIME/ here)")
    p.add_argument("--networks", default=None,
                   help="comma-separated subset of networks for every section (e.g. vgg19,resnet18)")
    p.add_argument("--sections", default=None,
                   help="comma-separated subset of sections to run: table1_predicted, table1_measured, seed003, "
                        "seed004, tradeoff_predicted, tradeoff_measured (default: all)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: on a shared machine more threads than free cores "
                        "make every step several times slower and the timings noisy)")
    p.add_argument("--json", action="store_true", help="print one JSON object (the headline) at the end")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: write report.md again from the JSON results already in --out")


def fresh_folder(suite: str, root: Path = Path("remat-bench")) -> Path:
    """``root/SUITE-YYYYmmdd-HHMMSS``, with a suffix if that exists already: never a used folder."""
    stem = f"{suite}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, k = root / stem, 2
    while out.exists():
        out, k = root / f"{stem}-{k}", k + 1
    return out


def run(args: argparse.Namespace) -> int:
    from ..bench import SUITES, run_suite
    from ..bench.report import headline
    from ..machine import provenance

    suite = SUITES[args.suite]
    if args.networks:
        suite = suite.only(tuple(n.strip() for n in args.networks.split(",") if n.strip()))
    if args.sections:
        from ..bench.suite import sections_only

        suite = sections_only(suite, tuple(n.strip() for n in args.sections.split(",") if n.strip()))
    if args.report_only:
        if not args.out:
            raise InputError("--report-only writes report.md again from an earlier run's results: name that "
                             "run's folder with --out DIR")
        from ..bench.report import rewrite

        print(f"wrote {rewrite(Path(args.out))}")
        return 0
    if args.threads < 1:
        raise InputError(f"--threads must be at least 1, got {args.threads}: the default is 1")
    import torch

    if suite.device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"suite {suite.name!r} measures on CUDA, but torch {torch.__version__} sees no GPU: "
                         "run it on a machine with one, or use --suite paper (CPU)")
    out = Path(args.out) if args.out else fresh_folder(suite.name)
    torch.set_num_threads(args.threads)
    header = {**provenance(), "torch_threads": torch.get_num_threads()}
    with progress.task(f"remat bench --suite {suite.name}") as task:
        results = run_suite(suite, out, header, progress=task.note)
    if args.json:
        emit_json({"suite": suite.name, "out": str(out), "seconds": results["seconds"],
                   "headline": headline(results["sections"])})
        return 0
    print_headline(headline(results["sections"]))
    text(f"wrote {out}/report.md and {len(list(out.iterdir()))} files in {seconds(results['seconds'])}")
    return 0


def print_headline(rows: list[dict[str, Any]]) -> None:
    """The headline, narrow: predicted at the paper's batch, measured at the run's size."""
    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * x:.0f}%"

    def ratio(x: Any) -> str:
        return "-" if x is None else f"{x:.2f}x"

    alloc = next((r["allocator"] for r in rows if "allocator" in r), "storage")
    table("remat bench: the best plan per network (reduction = memory saved vs vanilla)",
          ["network", "vanilla (pred.)", "best (pred.)", "reduction", "time", "reduction (meas.)", "time (meas.)"],
          [(r["network"], size(r.get("predicted_vanilla")), r.get("predicted_best") or "-",
            pct(r.get("predicted_reduction")), ratio(r.get("predicted_time_ratio")),
            pct(r.get(f"measured_reduction_{alloc}", r.get("measured_reduction_storage"))),
            ratio(r.get(f"measured_time_ratio_{alloc}", r.get("measured_time_ratio_storage")))) for r in rows],
          caption="pred.: simulated at the paper's batch; meas.: measured at the run's size (report.md has all)")
