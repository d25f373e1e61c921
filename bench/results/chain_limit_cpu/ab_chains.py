"""A/B at half the vanilla peak: remat inductor with the fused search's chain limit (as committed, "new") and
without it ("unlimited": any chain of recomputed values, as before). argv: model, dtype[, rounds]."""
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_inductor import at_half_vanilla  # noqa: E402
from remat.compiled import partitioner  # noqa: E402


@contextlib.contextmanager
def unlimited():
    was, partitioner.FUSED_CHAIN_LIMIT = partitioner.FUSED_CHAIN_LIMIT, None
    try:
        yield
    finally:
        partitioner.FUSED_CHAIN_LIMIT = was


if __name__ == "__main__":
    at_half_vanilla(sys.argv, {"unlimited": unlimited})
