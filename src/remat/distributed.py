"""remat under data-parallel wrappers: DDP and FSDP2, in the orders that keep gradients exact.

DDP (``torch.nn.parallel.DistributedDataParallel``), both orders:

- ``DDP(remat.optimize(model, inputs, budget))``: DDP all-reduces the gradients the planned step
  accumulates into the parameters, as for any module (its hooks are on the parameters' gradient
  accumulators, which the planned backward feeds).
- ``remat.optimize(DDP(model), inputs, budget)``: tracing through DDP's forward would skip its
  per-step bookkeeping (``prepare_for_backward``) on every step after the first, so gradients
  would silently stop being all-reduced. Instead the module inside (``ddp.module``) is optimized
  and put back inside the same DDP, which is returned: DDP's own forward runs around the planned
  step, its all-reduce unchanged. ``ddp.module`` is then the planned module (``.plan``,
  ``.report``; ``ddp.report`` too). ``ddp.state_dict()`` keys do not change.

FSDP2 (``torch.distributed.fsdp.fully_shard``):

- ``fully_shard(remat.optimize(model, ...))``: works, the whole planned module as one FSDP unit.
  The planned step reads the parameters when it runs (``compiled.module._Flat.tensors``), so it
  sees the unsharded ones FSDP's pre-forward hook puts in place, and FSDP reduce-scatters the
  gradients the step produces.
- ``fully_shard`` on submodules of a model (per block, the usual FSDP2 layout), either order: the
  planned step runs the whole model as one traced function, so the per-block hooks that gather
  and free each block's parameters never run. Refused: ``remat.optimize`` on a model holding
  FSDP2 modules raises, and a planned step that finds sharded (DTensor) parameters raises.
- ``remat.optimize(fully_shard(model), ...)``: refused, with the order that works.

FSDP2 per block under ``torch.compile(model, backend=remat.backend(...))`` (or each block compiled):
dynamo breaks at every block's FSDP hooks and compiles the block's forward once, run per block (or a
graph per block where blocks differ); the hooks gather and free parameters as in eager FSDP2, and the
backend plans the block's graph for its calls in a step (``compiled.chain``). Gradients equal plain
FSDP2's. A byte budget covers the compiled graphs: FSDP's gathered parameters and the eager code
between blocks come on top.

``torch.compile`` with ``remat.backend``: ``DDP(torch.compile(model, backend=remat.backend(...)))``
plans the model inside DDP. ``torch.compile(DDP(model), backend=...)`` is torch's own path
(DDPOptimizer); with this torch build on the CPU it graph-breaks in DDP's forward and compiles no
graph with any backend, inductor included, so it runs eagerly with plain DDP's gradients and
``backend.report`` stays empty (tests/test_distributed.py checks both).
"""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

from .errors import InputError

FSDP2_ORDER = ("apply fully_shard to the module remat.optimize returns, as one unit: "
               "fully_shard(remat.optimize(model, inputs, budget))")


def is_ddp(model: Any) -> bool:
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(model, DistributedDataParallel)


def is_fsdp(model: Any) -> bool:
    """An FSDP2 module (``fully_shard``) or a classic ``FullyShardedDataParallel``."""
    try:
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    except ImportError:  # torch built without distributed
        return False
    return isinstance(model, (FSDPModule, FullyShardedDataParallel))


def fsdp_inside(model: nn.Module) -> list[str]:
    """Paths of the FSDP modules in ``model`` (``""`` for the model itself)."""
    return [name for name, m in model.named_modules() if is_fsdp(m)]


def optimize_wrapped(model: nn.Module, optimize_inner: Callable[[nn.Module], nn.Module]) -> nn.Module | None:
    """``remat.optimize`` on a wrapped model: DDP gets the planned module inside it (returned);
    FSDP anywhere in the model is refused with the order that works; None for other models."""
    if is_ddp(model):
        inner = model.module
        if fsdp_inside(inner):
            raise InputError(f"remat.optimize: the model inside DDP holds FSDP modules; {FSDP2_ORDER}")
        planned = optimize_inner(inner)
        model.module = planned  # DDP's forward (all-reduce bookkeeping) now runs around the planned step
        model.report = getattr(planned, "report", None)
        return model
    paths = fsdp_inside(model)
    if paths:
        where = "the model itself" if paths[0] == "" else f"{len(paths)} submodule(s), e.g. {paths[0]!r}"
        raise InputError(
            f"remat.optimize got a model sharded with FSDP ({where}): the planned step runs the whole model as "
            f"one traced function, so FSDP's per-module hooks (gather parameters, free them, reduce-scatter "
            f"gradients) would not run. Optimize the plain model, then shard: {FSDP2_ORDER}. For per-block "
            f"sharding, compile instead: torch.compile(model, backend=remat.backend(budget=...)) plans each "
            f"block's graph between FSDP's hooks")
    return None
