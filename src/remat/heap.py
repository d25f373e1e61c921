"""Planning without the cyclic garbage collector walking the whole heap over and over.

Planning makes many short-lived objects (a split's fx graphs, a simulation's lists), so Python's
collector runs often, and each full collection walks every object alive: the model, torch,
transformers, the joint graph. On a captured HF ResNet-152 that was 45% of the time of judging a
plan's fused code (0.81 s a judge against 0.47 s with the collector off). ``frozen()`` moves what
exists when planning starts to the collector's permanent generation (``gc.freeze``), so only the
objects planning makes are walked, and gives it back after (``gc.unfreeze``). Garbage planning makes
is still collected while it runs; a reference cycle that was alive when planning started and dies
during it is collected after it instead.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """The heap alive on entry frozen for the ``with`` block; a no-op inside another freeze (its
    own or the caller's: ``gc.unfreeze`` would thaw theirs too)."""
    if gc.get_freeze_count() > 0 or not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
