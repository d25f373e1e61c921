"""One budget syntax for the Python API and every ``remat`` command.

A budget is one of:

- bytes: ``2_000_000``, ``"2000000"``, ``3e9`` (for a graph file: its own units);
- a size with a unit: ``"512MiB"``, ``"4 GiB"``, ``"300KiB"`` (binary) or ``"2GB"``, ``"512 MB"``,
  ``"1.5kB"`` (decimal); ``B``, ``TB`` and ``TiB`` too, any case;
- a percentage of the vanilla peak: ``"40%"``;
- a fraction of the vanilla peak: a number in (0, 1), ``0.4`` or ``"0.4"`` (never 0.4 bytes).

Negative, infinite and NaN budgets, ``True``/``False`` and anything else are refused with a
:class:`remat.BudgetError` that names what was given and the accepted forms. A relative budget
(percentage or fraction) needs the vanilla peak, which is often known only later (after
capturing the model), so :func:`parse` returns a :class:`Budget` and :meth:`Budget.resolve`
turns it into bytes; :func:`parse_budget` does both.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from numbers import Real
from typing import Any

from .errors import BudgetError

UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
ACCEPTED = ("a number of bytes (2000000), a size with a unit (512MiB, 4GiB, 2GB), a percentage of the "
            "vanilla peak (40%) or a fraction of it in (0, 1) (0.4)")
_NUMBER = r"[0-9][0-9_]*(?:\.[0-9_]*)?(?:e[+-]?[0-9]+)?|\.[0-9_]+(?:e[+-]?[0-9]+)?"
_SYNTAX = re.compile(rf"({_NUMBER})\s*(%|[kmgt]?i?b)?", re.IGNORECASE)


@dataclass(frozen=True)
class Budget:
    """A parsed budget: ``bytes`` of memory, or ``fraction`` of the vanilla peak (1.0 is 100%)."""

    value: float
    relative: bool
    given: Any = None

    def resolve(self, vanilla_peak: float | None) -> float:
        """Bytes: the value itself, or the fraction of ``vanilla_peak``."""
        if not self.relative:
            return self.value
        if vanilla_peak is None:
            raise BudgetError(f"budget {self.given!r} is relative to the vanilla peak, which is not known here: "
                              f"give bytes or a size instead (e.g. 4GiB)")
        return self.value * vanilla_peak

    def __str__(self) -> str:
        if self.relative:
            return f"{100 * self.value:g}%"
        return fmt_bytes(self.value)


def parse(budget: Any, what: str = "budget") -> Budget:
    """A :class:`Budget` from any accepted form (module docstring); ``what`` names it in errors
    (``"--budget"`` in the CLI). A ``Budget`` is returned as it is."""
    if isinstance(budget, Budget):
        return budget
    if isinstance(budget, bool) or budget is None or not isinstance(budget, (Real, str)):
        raise BudgetError(f"{what} must be {ACCEPTED}; got {budget!r}")
    if isinstance(budget, str):
        text = budget.strip()
        m = _SYNTAX.fullmatch(text)
        if not m:
            raise BudgetError(f"{what} must be {ACCEPTED}; got {budget!r}")
        try:
            value = float(m.group(1))
        except ValueError:  # underscores in odd places ("1__0")
            raise BudgetError(f"{what} must be {ACCEPTED}; got {budget!r}") from None
        unit = (m.group(2) or "").lower()
    else:
        value, unit = float(budget), ""
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise BudgetError(f"{what} must be a finite, non-negative amount: {ACCEPTED}; got {budget!r}")
    if unit == "%":
        if value == 0:
            raise BudgetError(f"{what} must be above 0%, got {budget!r}, which leaves no memory for any plan: "
                              f"give e.g. 40%")
        return Budget(value / 100.0, True, budget)
    if unit:
        return Budget(value * UNITS[unit], False, budget)
    if 0 < value < 1:  # a fraction of the vanilla peak, never a fraction of a byte
        return Budget(value, True, budget)
    return Budget(value, False, budget)


def parse_budget(budget: Any, vanilla_peak: float | None, what: str = "budget") -> float:
    """Bytes from ``2_000_000``, ``"2GiB"``, ``"512 MB"``, ``"40%"`` or ``0.4`` (of ``vanilla_peak``)."""
    return parse(budget, what).resolve(vanilla_peak)


def is_relative(budget: Any) -> bool:
    """Whether ``budget`` is a percentage or fraction of the vanilla peak (False if unreadable)."""
    try:
        return parse(budget).relative
    except BudgetError:
        return False


def fmt_bytes(n: float | None) -> str:
    """``1.50 GiB``, ``12.00 MiB``, ``3.00 KiB``, ``512 B`` (binary units); ``-`` for None."""
    if n is None:
        return "-"
    if isinstance(n, float) and not math.isfinite(n):
        return str(n)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


__all__ = ["ACCEPTED", "Budget", "UNITS", "fmt_bytes", "is_relative", "parse", "parse_budget"]
