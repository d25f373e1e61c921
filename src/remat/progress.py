"""Progress of long steps (capture, each solver, min-budget, verification, bench) on stderr.

``with progress.task("capturing GPT2 on fake tensors"):`` shows a rich spinner line with the
elapsed time while the block runs, and removes it when the block ends; tasks nest (a solver's
line under the planning line). ``progress.note("dp-approx at 2.1 GiB")`` updates the detail of
the innermost task. Nothing is shown unless stderr is a terminal, so logs, pipes and tests see
no progress output; ``REMAT_PROGRESS=1`` (or ``remat --progress always``) forces it on,
``REMAT_PROGRESS=0`` (``--progress never``) off. Only the process that opened the display draws
(solvers forked by ``auto`` stay silent), and stdout is never written to.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any, Iterator

_FORCED: bool | None = None   # set by enable(); None: the REMAT_PROGRESS variable, then isatty
_lock = threading.RLock()
_live: Any = None               # the rich Progress shown now (outermost task open), or None
_owner_pid: int | None = None
_stack: list["Task"] = []


def enable(on: bool | None) -> None:
    """Force progress on (True) or off (False); None: automatic (stderr is a terminal)."""
    global _FORCED
    _FORCED = on


def enabled() -> bool:
    """Whether progress is shown: forced, else ``REMAT_PROGRESS``, else stderr is a terminal."""
    if _FORCED is not None:
        return _FORCED
    env = os.environ.get("REMAT_PROGRESS", "").strip().lower()
    if env in ("1", "true", "yes", "on", "always"):
        return True
    if env in ("0", "false", "no", "off", "never"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Task:
    """One line of the display; a no-op when progress is off."""

    def __init__(self, description: str, total: float | None, task_id: Any = None) -> None:
        self.description = description
        self.total = total
        self.id = task_id

    def _update(self, **fields: Any) -> None:
        if self.id is None or _live is None or os.getpid() != _owner_pid:
            return
        with _lock:
            _live.update(self.id, **fields)

    def advance(self, amount: float = 1.0) -> None:
        self._update(advance=amount)

    def note(self, detail: str) -> None:
        """Show ``detail`` after the description (what this step is doing now)."""
        self._update(description=f"{self.description} [dim]{_escape(detail)}[/]")

    def describe(self, description: str) -> None:
        indent = self.description[: len(self.description) - len(self.description.lstrip())]
        self.description = indent + _escape(description)
        self._update(description=self.description)


@contextlib.contextmanager
def task(description: str, total: float | None = None) -> Iterator[Task]:
    """A progress line for the ``with`` block (see the module docstring)."""
    global _live, _owner_pid
    if not enabled() or (_owner_pid is not None and os.getpid() != _owner_pid):
        yield Task(description, total)
        return
    with _lock:
        if _live is None:
            _live = _make_display()
            _owner_pid = os.getpid()
            _live.start()
        t = Task("  " * len(_stack) + _escape(description), total)
        t.id = _live.add_task(t.description, total=total)
        _stack.append(t)
    try:
        yield t
    finally:
        with _lock:
            if t in _stack:
                _stack.remove(t)
            if _live is not None:
                _live.remove_task(t.id)
                if not _stack:
                    _live.stop()
                    _live = None
                    _owner_pid = None


def note(detail: str) -> None:
    """Update the detail of the innermost open task (a no-op when none is open)."""
    if _stack:
        _stack[-1].note(detail)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _make_display() -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.table import Table
    from rich.text import Text

    class Counted(ProgressColumn):
        """A bar and ``k/n`` for tasks with a total; nothing for open-ended ones."""

        bar = BarColumn(bar_width=16)

        def render(self, task: Any) -> Any:
            if task.total is None:
                return Text("")
            row = Table.grid(padding=(0, 1))
            row.add_row(self.bar.render(task), f"{task.completed:.0f}/{task.total:.0f}")
            return row

    console = Console(file=sys.stderr, force_terminal=True if _FORCED or not sys.stderr.isatty() else None)
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), Counted(), TimeElapsedColumn(),
                    console=console, transient=True, refresh_per_second=8, redirect_stdout=False,
                    redirect_stderr=False)


@contextlib.contextmanager
def quiet_fd(fd: int = 2) -> Iterator[None]:
    """Silence what C/C++ code writes to file descriptor ``fd`` (stderr by default) in the block:
    the profiler's ``STAGE:``/``USDT:`` lines. Python-level writes in the block are dropped too."""
    try:
        saved = os.dup(fd)
    except OSError:  # no such descriptor (embedded interpreters): nothing to silence
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(devnull)




@contextlib.contextmanager
def quiet_profiler(**kwargs: Any) -> Iterator[Any]:
    """``torch.profiler.profile(**kwargs)`` without the lines it prints from C++ on stderr
    (``STAGE:``/``USDT:`` at start and stop, allocator warnings while it runs). The progress
    display is held still meanwhile, so none of its drawing is lost."""
    from torch.profiler import profile

    prof = profile(**kwargs)
    live = getattr(_live, "live", None)
    hold = getattr(live, "_lock", None) if os.getpid() == _owner_pid else None
    with hold if hold is not None else contextlib.nullcontext(), quiet_fd():
        prof.start()
        try:
            yield prof
        finally:
            prof.stop()

__all__ = ["Task", "enable", "enabled", "note", "quiet_fd", "quiet_profiler", "task"]
