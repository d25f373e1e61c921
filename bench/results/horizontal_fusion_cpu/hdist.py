"""Run bench_architectures with fusion.HORIZONTAL_DISTANCE set from argv[1] (a knob of 3dd9cdf; removed after)."""
import sys, runpy
sys.path.insert(0, "src")
from remat.compiled import fusion
fusion.HORIZONTAL_DISTANCE = int(sys.argv[1])
sys.argv = ["bench/bench_architectures.py", *sys.argv[2:]]
runpy.run_path("bench/bench_architectures.py", run_name="__main__")
