"""``remat bench [--suite quick|paper] [--out DIR]``: the papers' tables, predicted and measured.

Writes one JSON per section (machine and exact command in each), PNG plots and report.md into
``--out`` (default ``bench/results/<suite>/``). ``quick`` finishes in minutes on a laptop CPU;
``paper`` is the full run, by hand; ``gpu`` is ``paper`` with its measured sections on CUDA at the
papers' own batch and image sizes (CUDA allocator peaks). ``--networks`` restricts every section to some networks.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._output import emit_json

NAME = "bench"
HELP = "run the benchmark suite: the papers' tables, predicted and measured, with the peers"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", choices=["quick", "paper", "gpu"], default="quick")
    p.add_argument("--out", default=None, help="output folder (default bench/results/<suite>/)")
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


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..bench import SUITES, run_suite
    from ..bench.report import headline
    from ..machine import provenance

    suite = SUITES[args.suite]
    if args.networks:
        suite = suite.only(tuple(n.strip() for n in args.networks.split(",") if n.strip()))
    if args.sections:
        from ..bench.suite import sections_only

        suite = sections_only(suite, tuple(n.strip() for n in args.sections.split(",") if n.strip()))
    out = Path(args.out) if args.out else Path("bench/results") / suite.name
    if args.report_only:
        from ..bench.report import rewrite

        print(f"wrote {rewrite(out)}")
        return 0
    if args.threads < 1:
        raise ValueError(f"--threads must be at least 1, got {args.threads}")
    import torch

    if suite.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"suite {suite.name!r} measures on CUDA, but torch {torch.__version__} sees no GPU: "
                         "run it on a machine with one, or use --suite paper (CPU)")
    torch.set_num_threads(args.threads)
    header = {**provenance(), "torch_threads": torch.get_num_threads()}
    console = Console(stderr=True)
    with console.status(f"remat bench --suite {suite.name}") as status:
        def progress(message: str) -> None:
            status.update(f"[bold]{suite.name}[/]: {message}")
            console.log(message)

        results = run_suite(suite, out, header, progress=progress)
    if args.json:
        emit_json({"suite": suite.name, "out": str(out), "seconds": results["seconds"],
                   "headline": headline(results["sections"])})
    else:
        console = Console()
        console.print(f"wrote {out}/report.md and {len(list(out.iterdir()))} files in {results['seconds']:.0f} s")
        console.print((out / "report.md").read_text().split("## ")[1])  # the headline section
    return 0
