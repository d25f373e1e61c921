"""How far the partitioner searches, as one frozen value passed in (``Planner(search=...)``,
``remat.optimize(..., search=...)``, ``remat.backend(..., search=...)``).

The planner's searches beyond the solvers (``judged``: plans judged by the generated code's own peak;
``partitioner._below``: planning budgets under the budget) have time limits, thresholds that decide
when each runs, and an aside for what the fused walk does not model. They are fields here, not
module constants read deep inside the planner, so a caller (a test, a benchmark, a user trading
planning time for plan quality) changes them for one planner without touching anyone else's. The
defaults are the values the benchmarks in docs/results.md were measured with.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..solvers.selective import CHAIN_LIMIT


@dataclass(frozen=True)
class Searching:
    """The partitioner's search limits and thresholds (the module docstring)."""

    code_rounds: int = 3          # re-plans when the generated code's own peak is over the budget
    loosen: float = 0.02          # room under the budget (fraction) worth planning again for, under inductor
    room: float = 0.05            # room under the budget (fraction) the eager code's judged search is run for
    fused_margin: float = 0.03    # aside for what the fused walk does not model: on a GPU (not measured since
                                  # ``fusionguard``)
    fused_margin_cpu: float = 0.01  # on the CPU: every held-out plan measured at 0.997-1.000 of its walk since
                                    # ``fusionguard``
    shortlist: int = 3            # auto's candidates re-planned with within lower planning budgets (the cheapest
    shortlist_within: float = 1.5  # at the budget), those of them recomputing at most this times the cheapest's
    below_first: float = 0.10     # eager code over the budget by at most this (fraction): plan within less before
                                  # the judged search
    judged_over: float = 1.5      # a judged plan recomputing more than this times the plan over the budget: search
                                  # lower planning budgets too
    output_grads_worth: float = 0.1  # share of the least budget the outputs' gradients take before a refusal
                                     # names them
    fused_seconds: float = 60.0   # time limit of the fused selective search (each prefix is split and walked)
    fused_chain_limit: int | None = CHAIN_LIMIT  # its moves from the vanilla step: ``selective.drop_order``'s
                                                 # chain_limit (None: searched only as the moves come)
    give_back_seconds: float = 15.0  # the same search from a plan whose fused code fits (2.5 s on the held-out
                                     # ResNet)
    code_seconds: float = 3.0     # time limit of the same search judged by the eager code's walk (after a re-plan)
    code_floor_seconds: float = 1.0  # time limit of each start of that search for its least peak (``_code_floor``)
    code_seeds: tuple[str, ...] = ("selective-chains", "selective")  # under auto, that search also starts from
                                                                     # these solvers' own plans
    fused_undo: int = 16          # moves the fused search tries to take back under the budget (a walk each)


def cache_term(search: Searching | None) -> str | None:
    """What a non-default ``search`` adds to a stored plan's key (None for the defaults: the keys of plans stored
    before ``Searching`` existed stay valid)."""
    return None if search is None or search == Searching() else repr(search)


def checked_search(search: Searching | None) -> Searching:
    """``search``, or the defaults for None; anything else is refused, naming the type to pass."""
    if search is None:
        return Searching()
    if not isinstance(search, Searching):
        raise InputError(f"search must be a remat.Searching (the partitioner's search limits), got {search!r}")
    return search
