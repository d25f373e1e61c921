"""Harness check: the same plan built twice, timed at two places in each round, beside eager vanilla."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_inductor import AB
from remat.bench import heldout

ab = AB(sys.argv[1], sys.argv[2])
ab.add("vanilla", ab.held.model)
ab.add("compile", heldout.Compiled(ab.held.model, "inductor", 1.0, "ab_compile"))
at = int(ab.rows["compile"]["peak"])
ab.remat("at_peak", at)
ab.remat("half", int(0.5 * ab.rows["vanilla"]["peak"]))
ab.remat("at_peak_again", at)
ab.remat("full", "100%")
ab.finish(int(sys.argv[3]) if len(sys.argv) > 3 else 25)
