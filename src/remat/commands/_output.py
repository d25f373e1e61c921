"""Shared printing for subcommands: JSON with ``--json`` (a summary) or ``--json-full`` (with
schedules and every detail), else a rich table that fits the terminal: values are folded onto
a second line, never cut, and sizes are printed in KiB/MiB/GiB."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, Iterable

from ..budget import fmt_bytes

LEFT = ("solver", "name", "field", "budget", "status", "note", "value")


def add_json_arguments(p: argparse.ArgumentParser, full: str | None = None) -> None:
    """``--json`` (a compact summary), and ``--json-full`` when ``full`` says what it adds."""
    p.add_argument("--json", action="store_true", help="print one JSON object (a summary) on stdout")
    if full:
        p.add_argument("--json-full", action="store_true", help=f"print one JSON object with {full}")


def emit_json(obj: Any, full: bool = False) -> None:
    """A summary indented for reading; a full record (``full``) on one line, for tools."""
    if full:
        print(json.dumps(obj, default=str, separators=(",", ":")))
    else:
        print(json.dumps(obj, indent=2, default=str))


def fmt(x: Any) -> str:
    if isinstance(x, bool) or x is None:
        return "-" if x is None else ("yes" if x else "no")
    if isinstance(x, float):
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        if math.isnan(x):
            return "nan"
        return f"{x:.4g}" if not x.is_integer() else f"{int(x)}"
    return str(x)


def size(x: float | None) -> str:
    """A memory amount: KiB/MiB/GiB from 1 KiB up (graph units below that, e.g. ``9``)."""
    if x is None:
        return "-"
    if isinstance(x, str) or (isinstance(x, float) and not math.isfinite(x)):
        return str(x)
    return fmt_bytes(x) if abs(x) >= 1024 else fmt(float(x))


def percent(part: float | None, whole: float | None) -> str:
    if part is None or not whole:
        return "-"
    return f"{100 * part / whole:.1f}%"


def seconds(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f} s" if x < 10 else f"{x:.1f} s"


def table(title: str | None, columns: list[str], rows: Iterable[Iterable[Any]], caption: str | None = None) -> None:
    """A rich table on stdout, as narrow as its content: words are never split unless a single
    word is wider than the terminal, and then its cell folds onto more lines rather than being cut."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    cells = [[x if isinstance(x, str) else fmt(x) for x in r] for r in rows]
    t = Table(title=title, caption=caption, title_justify="left", caption_justify="left", box=box.SIMPLE_HEAD,
              show_edge=False, pad_edge=False, collapse_padding=True)
    for i, c in enumerate(columns):
        words = [w for text in [c, *(r[i] for r in cells if i < len(r))] for w in text.split()]
        t.add_column(c, justify="left" if c in LEFT else "right", overflow="fold",
                     min_width=min(max((len(w) for w in words), default=1), 24))
    for r in cells:
        t.add_row(*r)
    Console(soft_wrap=False).print(t)


def text(message: str) -> None:
    """A paragraph on stdout, wrapped at the terminal's width (words never cut)."""
    from rich.console import Console

    Console(highlight=False).print(message, markup=False)
