"""The peers remat is compared with in the same run: what a PyTorch user would do instead.

- ``checkpoint_blocks(model)``: ``torch.utils.checkpoint`` on every block of the model, the
  usual hand-written recipe. Blocks are found structurally (the zoo's models have no common
  block API): a top-level ``Sequential``/``ModuleList`` whose members are themselves modules
  with children (ResNet stages, Transformer layers, DenseNet blocks) has each such member
  checkpointed; one made only of single layers (VGG's ``features``, the FFN) is cut into
  round(sqrt(n)) segments with ``checkpoint_sequential`` (seed 002 §4.3's sqrt(n) rule); any
  other top-level module with children (an Inception module, a U-Net stage) is a block itself,
  except a backbone holding most of the parameters, whose own children are searched the same
  way (PSPNet's ResNet). A model that exposes ``blocks()`` (module names) is used as it says.
- ``Compiled(model, budget)``: ``torch.compile`` (backend ``aot_eager``)
  with ``torch._functorch.config.activation_memory_budget = budget``: the min-cut partitioner
  chooses what to recompute. Its memory must be measured with the profiler method
  (``steps.measured_peak(..., "profiler")``): under a dispatch mode torch.compile silently runs eager.

Both work on a deep copy; the caller's model is untouched. Tested in tests/test_bench.py:
same gradients as the plain model, the blocks found on small models, and fewer saved bytes.
"""

from __future__ import annotations

import copy
import inspect
import math
import types
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from ..errors import InputError


BACKBONE_SHARE = 0.5  # a child with more than this share of the parameters is searched inside


class Checkpointed(nn.Module):
    """Runs ``inner`` under non-reentrant activation checkpointing."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return checkpoint(self.inner, *args, use_reentrant=False, **kwargs)


class CheckpointedSequential(nn.Module):
    """A Sequential of single layers, checkpointed in ``segments`` segments."""

    def __init__(self, inner: nn.Sequential, segments: int) -> None:
        super().__init__()
        self.inner = inner
        self.segments = segments

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint_sequential(self.inner, self.segments, x, use_reentrant=False)


def _has_children(m: nn.Module) -> bool:
    return next(m.children(), None) is not None


def _params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def _wrap_children(parent: nn.Module, prefix: str, total: int, wrapped: list[str]) -> None:
    for name, child in list(parent.named_children()):
        path = f"{prefix}{name}"
        if isinstance(child, (nn.Sequential, nn.ModuleList)):
            members = list(child.named_children())
            if members and not any(_has_children(m) for _, m in members):
                if isinstance(child, nn.Sequential) and len(members) > 1:
                    segments = max(1, round(math.sqrt(len(members))))
                    setattr(parent, name, CheckpointedSequential(child, segments))
                    wrapped.append(f"{path} ({segments} segments)")
                continue
            for key, member in members:
                if _has_children(member):
                    child._modules[key] = Checkpointed(member)
                    wrapped.append(f"{path}.{key}")
        elif _has_children(child):
            if total and _params(child) > BACKBONE_SHARE * total:
                _wrap_children(child, f"{path}.", total, wrapped)
            else:
                setattr(parent, name, Checkpointed(child))
                wrapped.append(path)


def checkpoint_blocks(model: nn.Module) -> tuple[nn.Module, list[str]]:
    """A copy of ``model`` with every block checkpointed, and the names of what was wrapped."""
    model = copy.deepcopy(model)
    wrapped: list[str] = []
    if inspect.ismethod(getattr(model, "blocks", None)):  # a method, not a submodule named so
        for path in model.blocks():
            parent_path, _, name = path.rpartition(".")
            parent = model.get_submodule(parent_path) if parent_path else model
            parent._modules[name] = Checkpointed(parent._modules[name])
            wrapped.append(path)
    else:
        _wrap_children(model, "", _params(model), wrapped)
    if not wrapped:
        raise InputError(f"{type(model).__name__} has no blocks to checkpoint: its top-level "
                         "modules are single layers; give it a blocks() method naming them")
    return model, wrapped


class Compiled(nn.Module):
    """``torch.compile`` of a model, planned under ``activation_memory_budget = budget``.

    The partitioner reads the budget when the forward is compiled, so the config is patched
    around every forward call (a recompile plans with the same budget). ``inner`` holds the
    model, so its parameters (and gradients) are this module's.
    """

    def __init__(self, inner: nn.Module, budget: float) -> None:
        super().__init__()
        if not 0.0 <= budget <= 1.0:
            raise InputError(f"activation_memory_budget must be in [0, 1], got {budget}")
        self.inner = inner
        self.budget = budget
        self.fn = torch.compile(_fresh_entry(inner, f"{id(inner)}"), backend="aot_eager")

    def forward(self, *args: Any) -> Any:
        import torch._functorch.config as functorch_config

        with functorch_config.patch(activation_memory_budget=self.budget):
            return self.fn(*args)


def _fresh_entry(model: nn.Module, tag: str) -> Callable[..., Any]:
    """``model(*args)`` as a function with its own code object.

    Dynamo caches compiled graphs per code object and, with nn modules inlined, guards on
    shapes rather than on which module: two peers compiled from the same forward would share
    one graph, planned under the first one's budget. A distinct code object per peer avoids it.
    """
    def entry(*args: Any) -> Any:
        return model(*args)

    code = entry.__code__.replace(co_name=f"remat_peer_{tag}")
    return types.FunctionType(code, entry.__globals__, code.co_name, None, entry.__closure__)
