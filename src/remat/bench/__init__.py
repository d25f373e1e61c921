"""The benchmark suite behind ``remat bench`` (issue 5): the papers' tables and figures, predicted
and measured, with the peers in the same run.

Modules, in processing order:

    tables.py    PREDICTED tables on the papers' abstract graphs: seed 000 Table 1, seed 003
                 Tables 1-2, seed 004 Figures 2-3 and Table 2, budget sweeps of every solver
    steps.py     real training steps: profiler-method peak, round-robin timing, time ratios
    peers.py     per-block torch.utils.checkpoint and torch.compile's activation_memory_budget
    measured.py  MEASURED tables: Table 1's methods and the trade-off with the peers, on CPU
    plots.py     PNG plots (matplotlib Agg)
    report.py    the Markdown report and its headline table
    suite.py     the ``quick`` and ``paper`` suites and ``run_suite``, which writes it all
"""

from .suite import SUITES, Suite, run_suite

__all__ = ["SUITES", "Suite", "run_suite"]
