"""Solver registry: one module per algorithm family, one signature, dispatch by name.

Every solver is ``solve(graph, budget, **options) -> Plan`` and registers itself with
``@register("name", problems=...)``. Modules in this package are imported on first lookup, so a
new algorithm is one new module and nothing else changes (DESIGN.md).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

from ..errors import UnknownSolverError
from ..plan import Plan

SolverFn = Callable[..., Plan]


@dataclass(frozen=True)
class SolverSpec:
    name: str
    fn: SolverFn
    problems: tuple[str, ...]
    summary: str
    min_budget: Callable[..., float] | None = None  # its own model's least budget: where its floor is sought
    floor: Callable[..., Plan | None] | None = None  # its least-peak plan, judged (remat.judge.floor)
    budget_free: bool = False  # its plan does not depend on the budget: one call answers every budget
    variants: tuple[dict, ...] = ({},)  # option sets its floor is sought with (the least wins)
    searches_budgets: bool = False  # it searches planning budgets itself (auto): one judged call answers a budget


_REGISTRY: dict[str, SolverSpec] = {}
_LOADED = False


def register(name: str, problems: tuple[str, ...] = ("training",),
             min_budget: Callable[..., float] | None = None,
             floor: Callable[..., Plan | None] | None = None,
             budget_free: bool = False, variants: tuple[dict, ...] = ({},),
             searches_budgets: bool = False) -> Callable[[SolverFn], SolverFn]:
    def deco(fn: SolverFn) -> SolverFn:
        doc = (fn.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = SolverSpec(name, fn, problems, doc[0] if doc else "", min_budget, floor, budget_free, variants,
                                     searches_budgets)
        return fn
    return deco


def _load_all() -> None:
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")


def registry() -> dict[str, SolverSpec]:
    global _LOADED
    if not _LOADED:
        _load_all()
        _LOADED = True
    return dict(_REGISTRY)


def get(name: str) -> SolverSpec:
    reg = registry()
    if name not in reg:
        raise UnknownSolverError(f"unknown solver {name!r}; known solvers: {', '.join(sorted(reg))}: "
                                 f"pass one of these names")
    return reg[name]


def names(problem: str | None = None) -> list[str]:
    return sorted(n for n, s in registry().items() if problem is None or problem in s.problems)
