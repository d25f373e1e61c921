"""What every benchmark result records about where and how it was produced."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from datetime import datetime, timezone


def machine_info() -> dict:
    """Platform, CPU count and library versions (torch only if it is importable)."""
    info = {"platform": platform.platform(), "machine": platform.machine(),
            "cpu_count": os.cpu_count(), "python": platform.python_version()}
    for mod in ("torch", "numpy", "networkx", "scipy"):
        try:
            info[mod] = __import__(mod).__version__
        except ImportError:
            pass
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


def provenance(argv: list[str] | None = None) -> dict:
    """The header of a result file: the command that produced it, when, and on what."""
    argv = sys.argv if argv is None else argv
    return {"command": shlex.join(argv), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": machine_info()}
