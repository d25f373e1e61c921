"""Shared printing for subcommands: one JSON object with ``--json``, else a rich table."""

from __future__ import annotations

import json
from typing import Any, Iterable

from rich.console import Console
from rich.table import Table


def emit_json(obj: Any) -> None:
    print(json.dumps(obj, indent=1, default=str))


def fmt(x: Any) -> str:
    if isinstance(x, float):
        if x == float("inf"):
            return "inf"
        return f"{x:.4g}" if not x.is_integer() else f"{int(x)}"
    return "-" if x is None else str(x)


def table(title: str, columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="right" if c not in ("solver", "name", "field") else "left")
    for r in rows:
        t.add_row(*(fmt(x) for x in r))
    Console().print(t)
