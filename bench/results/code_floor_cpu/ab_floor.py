"""Same-process A/B on the CPU-size held-out HF ResNet in bf16 at "50%", met only at the eager code's floor:
the floor plan as found ("old": ``Planner._cheapest_at`` returning it) against the plan the judged search reaches
from it at its own peak (committed). Run from the repository root:

    OUT=bench/results/code_floor_cpu OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python bench/results/code_floor_cpu/ab_floor.py
"""
import sys
from pathlib import Path
from unittest import mock

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]
from ab_inductor import AB  # noqa: E402
from remat.compiled import partitioner  # noqa: E402

ab = AB("resnet", "bf16")
ab.add("vanilla", ab.held.model)
ab.optimized("old", "50%", during=lambda: mock.patch.object(partitioner.Planner, "_cheapest_at",
                                                            lambda self, jg, pg, low, tail, notes: low))
ab.optimized("new", "50%")
ab.finish(40, reference="vanilla")
