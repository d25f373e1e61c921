"""Facts about fx values worked out once while the planner judges plans.

Every split of a joint graph copies its nodes' metadata, so the walks of many splits ask the same
questions of the same value objects (a storage's size, a layout, an op's workspace key): within
``remembering`` each answer is kept per value object and question. Outside it nothing is kept.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Hashable, Iterator

_REMEMBERED: dict[tuple, tuple[object, Any]] | None = None


@contextlib.contextmanager
def remembering() -> Iterator[None]:
    """Within it, each fact about a value is worked out once (the planner's walks of one joint graph)."""
    global _REMEMBERED
    outer, _REMEMBERED = _REMEMBERED, {} if _REMEMBERED is None else _REMEMBERED
    try:
        yield
    finally:
        _REMEMBERED = outer


def remembered() -> dict[tuple, tuple[object, Any]] | None:
    """The facts kept now (None outside ``remembering``)."""
    return _REMEMBERED


def remember(val: object, tag: Hashable, compute: Callable[[], Any]) -> Any:
    """``compute()``, worked out once per value object and ``tag`` within ``remembering`` (the
    entry holds the value, so its id is not reused while the entry lives)."""
    if _REMEMBERED is None or val is None:
        return compute()
    key = (id(val), tag)
    hit = _REMEMBERED.get(key)
    if hit is not None and hit[0] is val:
        return hit[1]
    out = compute()
    _REMEMBERED[key] = (val, out)
    return out


def recall(key: Hashable, compute: Callable[[], Any]) -> Any:
    """``compute()``, worked out once per ``key`` (a fact of plain values: shapes, strides, dtypes)
    within ``remembering``; computed each time outside it, or where the key cannot be hashed (a
    symbolic size)."""
    if _REMEMBERED is None:
        return compute()
    try:
        hit = _REMEMBERED.get(("recall", key))
    except TypeError:
        return compute()
    if hit is None:
        hit = _REMEMBERED[("recall", key)] = (None, compute())
    return hit[1]
