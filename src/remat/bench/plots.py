"""PNG plots of the suite's tables (matplotlib, Agg backend: no display needed).

Every title says whether its figures are predicted (planned on abstract graphs, judged by the
liveness simulator) or measured (and by which method). Each function takes the rows a table
function returned and a path, writes one PNG and returns the path. Tested in
tests/test_bench.py: files are written and non-empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

Rows = list[dict[str, Any]]


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no data (see the JSON for why)", ha="center", transform=ax.transAxes)


def _ok(rows: Rows) -> Rows:
    return [r for r in rows if r.get("status") == "ok" and r.get("reduction") is not None]


def reductions(rows: Rows, path: Path, key: str = "reduction",
               title: str = "Seed 000 Table 1, PREDICTED (simulated liveness): memory reduction") -> Path:
    """Grouped bars: memory reduction of each method, per network."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get(key) is not None]
    nets = list(dict.fromkeys(r["network"] for r in ok))
    methods = [m for m in dict.fromkeys(r["method"] for r in ok) if m not in ("vanilla", "regular")]
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(nets) + 2), 4))
    width = 0.8 / max(1, len(methods))
    for i, m in enumerate(methods):
        vals = [next((100 * r[key] for r in ok if r["network"] == n and r["method"] == m), 0.0) for n in nets]
        ax.bar([j + i * width for j in range(len(nets))], vals, width, label=m)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(nets))], nets, rotation=20)
    ax.set_ylabel("memory reduction vs vanilla (%)")
    ax.set_title(title, fontsize=9)
    _legend(ax)
    return _save(fig, path)


def depth(rows: Rows, path: Path) -> Path:
    """Seed 004 Figures 2 and 3: peak memory and relative schedule length against depth."""
    families = list(dict.fromkeys(r["family"] for r in rows))
    fig, axes = plt.subplots(2, max(1, len(families)), figsize=(5 * max(1, len(families)), 7), squeeze=False)
    for col, fam in enumerate(families):
        mine = [r for r in rows if r["family"] == fam]
        for solver in dict.fromkeys(r["solver"] for r in mine):
            pts = sorted((r["depth"], r["peak"] / 2**20, r["relative_length"]) for r in mine if r["solver"] == solver)
            axes[0][col].plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=solver)
            axes[1][col].plot([p[0] for p in pts], [p[2] for p in pts], "o-", label=solver)
        axes[0][col].set_title(f"{fam}: peak memory M(σ), PREDICTED", fontsize=9)
        axes[0][col].set_ylabel("MiB")
        axes[1][col].set_title(f"{fam}: schedule length / NoRemat, PREDICTED", fontsize=9)
        axes[1][col].set_xlabel("depth")
        _legend(axes[0][col])
    return _save(fig, path)


def tradeoff(rows: Rows, path: Path, measured: bool) -> Path:
    """Memory (fraction of vanilla) against time ratio, one series per solver or peer."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    if measured:
        ok = [r for r in rows if r.get("status") == "ok" and r.get("memory_ratio") is not None]
        series = {r.get("solver") or r["method"]: [] for r in ok}
        for r in ok:
            series[r.get("solver") or r["method"]].append((r["time_ratio"], r["memory_ratio"]))
        where = "GPU (CUDA allocator)" if any(r.get("cuda_peak") for r in ok) else "CPU (profiler method)"
        title = f"MEASURED on {where}: peak memory vs step time, vs vanilla"
    else:
        ok = [r for r in _ok(rows) if r.get("feasible")]
        series = {r["solver"]: [] for r in ok}
        for r in ok:
            series[r["solver"]].append((r["time_ratio"], 1.0 - r["reduction"]))
        title = "PREDICTED (simulated liveness; time = 1 + recompute / 3 forward)"
    for name, pts in series.items():
        pts = sorted(set(pts))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-" if len(pts) > 1 else "s", label=name)
    net = rows[0].get("network", "") if rows else ""
    ax.set_title(f"{net}: {title}", fontsize=8)
    ax.set_xlabel("step time / vanilla")
    ax.set_ylabel("peak activation memory / vanilla")
    _legend(ax)
    return _save(fig, path)
