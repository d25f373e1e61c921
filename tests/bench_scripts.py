"""Load a script of bench/ as a module, for the tests' smoke runs of the benchmarks."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load(name: str) -> ModuleType:
    """bench/<name>.py as a module (bench/ is not a package)."""
    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
