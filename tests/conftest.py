import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """Op times and workspaces are cached on disk (``costs.Cache``): the suite keeps its own, one for the run (the
    workers inherit it), so that ops timed while two workers share the cores do not stay in the user's cache. Timed
    there, tiny convolutions and matmuls of later benchmarks read 5-26 ms where they run in tens of microseconds."""
    if "REMAT_CACHE_DIR" not in os.environ:  # (set: a worker, or the caller's choice)
        cache = tempfile.mkdtemp(prefix="remat-tests-")
        os.environ["REMAT_CACHE_DIR"] = cache
        config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))


@pytest.fixture(autouse=True)
def _thread_count_restored():
    """Each test starts at the worker's thread count: benchmarks run with one thread
    (``torch.set_num_threads(1)``) and leave it set, and plans depend on the count (convolution
    workspaces, measured costs): a ResNet test run after them in the same worker planned otherwise."""
    import torch

    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _floors_forgotten():
    """Each test seeks its floors afresh: ``remat.judge`` keeps them by the graph's content across
    planning calls, and a test that stands a solver in (monkeypatch) must not see another's."""
    yield
    from remat import judge

    judge.forget_floors()


@pytest.fixture
def nominal_cpu_costs(monkeypatch):
    """The CPU's nominal figures (``costs.DEVICES["cpu"]``) in place of this machine's measured
    ones, for tests of a planning path that a plan's op costs decide: the same plans on any host."""
    from remat.compiled import costs

    fig = {**costs.DEVICES["cpu"], "measured": 1.0, "version": costs.FIGURES_VERSION}
    monkeypatch.setattr(costs, "calibrate", lambda: fig)
    return fig


# files whose tests take a minute or more each (inductor compiles, bench smokes): handed out first, so that
# under ``-n 2 --dist worksteal`` the short ones fill the end instead of one worker idling behind a long one
LONG_FIRST = ("test_compiled.py", "test_bench.py", "test_architectures.py", "test_fusionguard.py",
              "test_bench_compiled.py", "test_eager_paths.py")


def pytest_collection_modifyitems(items: list) -> None:
    items.sort(key=lambda item: item.path.name not in LONG_FIRST)  # stable: file order kept within each part
