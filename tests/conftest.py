import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402


@pytest.fixture
def nominal_cpu_costs(monkeypatch):
    """The CPU's nominal figures (``costs.DEVICES["cpu"]``) in place of this machine's measured
    ones, for tests of a planning path that a plan's op costs decide: the same plans on any host."""
    from remat.compiled import costs

    fig = {**costs.DEVICES["cpu"], "measured": 1.0, "version": costs.FIGURES_VERSION}
    monkeypatch.setattr(costs, "calibrate", lambda: fig)
    return fig
