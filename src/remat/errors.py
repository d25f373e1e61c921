"""remat's exception types: every error remat raises on purpose is one of these.

Each is a ``RematError`` and also the built-in type that code written before them caught
(``ValueError`` for bad values, ``TypeError`` for wrong types, ``RuntimeError`` for a step that
cannot run), so ``except ValueError`` keeps working. Every message is one line: what was given,
what is accepted, and the fix.

    RematError
    ├── BudgetError          a budget that cannot be read (ValueError)
    │   └── InfeasibleError  a readable budget that no plan meets; names the smallest that works
    ├── InputError           a wrong argument: not a module, inputs the model cannot take, an
    │                        unknown mode / cost / executor / network (ValueError and TypeError)
    ├── CaptureError         the model cannot be traced into a graph (ValueError)
    ├── GraphError           a graph that cannot be planned on (ValueError)
    ├── ScheduleError        an invalid schedule, or a plan without one (ValueError)
    ├── SolverError          a solver refuses this graph or these options (ValueError)
    │   ├── UnknownSolverError   a name the registry does not know
    │   └── TooManyLowerSets     lower-set enumeration stopped at its cap (also RuntimeError)
    └── StepError            an optimized module called in a way its plan cannot serve (RuntimeError)

This module imports nothing heavy: the torch-free parts of remat raise these too.
"""

from __future__ import annotations


class RematError(Exception):
    """Base of every error remat raises itself; ``str(e)`` is one line that says what to do."""


class BudgetError(RematError, ValueError):
    """A budget remat cannot read: the message gives what was given and the accepted forms."""


class InfeasibleError(BudgetError):
    """No plan trains within the budget; the message gives the smallest budget that works, and
    ``needed`` its bytes where the refusal knows them (None where it names only a direction)."""

    def __init__(self, message: str, needed: float | None = None) -> None:
        super().__init__(message)
        self.needed = needed


class InputError(RematError, ValueError, TypeError):
    """A wrong argument (model, inputs, option value); the message names it and what is accepted."""


class CaptureError(RematError, ValueError):
    """The model cannot be traced; the message names the op and what to do."""


class GraphError(RematError, ValueError):
    """A graph that cannot be planned on; the message names the problem and the node."""


class ScheduleError(RematError, ValueError):
    """An invalid schedule; the message names the step and the missing value."""


class SolverError(RematError, ValueError):
    """A solver refuses this graph or these options; the message says which solver to use instead."""


class UnknownSolverError(SolverError):
    """A solver name the registry does not know; the message lists the known ones."""


class TooManyLowerSets(SolverError, RuntimeError):
    """Enumeration stopped at its cap; the message says how to proceed."""


class StepError(RematError, RuntimeError):
    """An optimized module was called in a way its plan cannot serve; the message says what to change."""


__all__ = ["BudgetError", "CaptureError", "GraphError", "InfeasibleError", "InputError", "RematError",
           "ScheduleError", "SolverError", "StepError", "TooManyLowerSets", "UnknownSolverError"]
