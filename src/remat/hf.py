"""Hugging Face models and ``Trainer``: one line, nothing else in the script changes.

    model = remat.hf.enable(model, budget="40%")        # before Trainer(model=model, ...)
    trainer = Trainer(model=model, args=TrainingArguments(...), train_dataset=..., eval_dataset=...)
    trainer.train(); trainer.evaluate(); trainer.save_model()

``enable`` keeps the model what it is (same class, config, ``save_pretrained``, parameters) and
replaces only its instance ``forward``: a training call (grad enabled, ``model.training``) runs
the step remat planned for its input signature; evaluation, ``no_grad`` and generation calls
run the model's own forward. The first training call plans (``remat.optimize`` on that batch:
the vanilla step measured, the plan verified); a later batch of another shape is planned the
same way, once (``shapes=[...]`` plans them up front, ``plan_cache=DIR`` keeps plans across runs).
Because the class and the forward's signature are the model's own, Trainer sees what it sees
without remat: its column filter keeps the model's inputs (no ``remove_unused_columns=False``),
``label_names`` are found (``eval_loss`` is reported), and ``save_model`` writes the model with
its tied weights as Hugging Face does. Caches (``cache``, ``past_key_values`` before transformers 5.24) are dropped in training.

Under ``torch.distributed`` (Trainer/accelerate wrapping the model in DDP) this is the order
``DDP(remat.optimize(model))``, whose gradients equal plain DDP's (``remat.distributed``).
Works for any ``nn.Module``, not only Hugging Face's. ``planned(model)`` is the planned module
(``.report``, ``.reports``, ``.plan``); ``disable(model)`` restores the model's own forward.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any

import torch
from torch import nn

from .compiled.costs import DEFAULT_COST
from .errors import InputError


class _Remat:
    """The state ``enable`` leaves on a model (``model._remat``): settings, the planned module."""

    def __init__(self, model: nn.Module, original: Any, options: dict[str, Any]) -> None:
        self.model = model
        self.original = original  # the model's own bound forward
        self.options = options
        self.module: nn.Module | None = None  # remat.compiled.module.CompiledModule, after the first training call
        self.active = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.active or not (torch.is_grad_enabled() and self.model.training):
            return self.original(*args, **kwargs)  # eval, no_grad, and remat's own calls of the model
        if args and kwargs:
            keywords = self._keywords(args, kwargs)
            if keywords is None:
                return self.original(*args, **kwargs)
            args, kwargs = (), keywords
        self.active = True
        try:
            if self.module is None:
                from .optimize import optimize

                self.module = optimize(self.model, kwargs if kwargs else args, **self.options)
            return self.module(*args, **kwargs)
        finally:
            self.active = False

    def _keywords(self, args: tuple, kwargs: dict) -> dict | None:
        """A call with positional and keyword arguments as keywords only (None: cannot be)."""
        try:
            bound = inspect.signature(self.original).bind(*args, **kwargs)
        except TypeError:
            return None
        out: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = bound.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                if value:
                    warnings.warn("remat.hf: a call with extra positional arguments runs the model's own forward",
                                  stacklevel=3)
                    return None
            elif kind is inspect.Parameter.VAR_KEYWORD:
                out.update(value)
            else:
                out[name] = value
        return out


def enable(model: nn.Module, budget: Any = "50%", solver: str = "auto", *, mode: str = "time",
           cost: str = DEFAULT_COST, verify: bool = True, plan_cache: Any = None, shapes: Any = None) -> nn.Module:
    """Train ``model`` within ``budget`` from its next training call on; returns the model itself.

    ``budget``, ``solver``, ``mode``, ``cost``, ``verify``, ``plan_cache`` and ``shapes`` are
    ``remat.optimize``'s. Calling it again on an enabled model replaces the settings (and plans).
    """
    from .budget import parse
    from .optimize import candidates

    if not isinstance(model, nn.Module):
        raise InputError(f"remat.hf.enable needs a torch.nn.Module (a transformers model), got {type(model).__name__}")
    candidates(solver)
    parse(budget)
    if mode not in ("time", "memory"):
        raise InputError(f"mode must be 'time' or 'memory', got {mode!r}")
    disable(model)
    original = model.forward
    state = _Remat(model, original, dict(budget=budget, solver=solver, mode=mode, cost=cost, verify=verify,
                                         plan_cache=plan_cache, shapes=shapes))

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        return state(*args, **kwargs)

    model.__dict__["_remat"] = state  # not a submodule: the planned module holds the model
    model.forward = forward
    return model


def disable(model: nn.Module) -> nn.Module:
    """The model's own forward back (plans dropped); a model never enabled is returned as it is."""
    state = model.__dict__.pop("_remat", None)
    if state is not None:
        model.__dict__.pop("forward", None)
    return model


def planned(model: nn.Module) -> Any:
    """The planned module of an enabled model (``.report``, ``.reports``, ``.plan``), or None
    before its first training call."""
    state = model.__dict__.get("_remat")
    return None if state is None else state.module
