#!/usr/bin/env bash
# The GPU benchmarks, on a machine with CUDA whose python3 has torch (CUDA build), numpy, networkx,
# scipy, rich and matplotlib; remat itself is taken from src/ (no install, so no torch download).
#
#   bash bench/gpu.sh runtime OUT            # bench_runtime.py on CUDA -> OUT/runtime_cuda.{json,md}
#   bash bench/gpu.sh table1 OUT [NETS]      # Table 1 methods at the papers' batch/image -> OUT/table1/
#   bash bench/gpu.sh tradeoff OUT [NETS]    # trade-off with the peers on CUDA -> OUT/tradeoff/
#
# Results of the runs on an H100 are committed under bench/results/gpu_h100/.
set -u
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
what=$1 out=$2 nets=${3:-}
remat() { python3 -c 'import sys; sys.argv[0] = "remat"; from remat.cli import main; sys.exit(main())' "$@"; }
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
mkdir -p "$out"
case $what in
  runtime) python3 bench/bench_runtime.py --device cuda --repeats 9 --out "$out/runtime_cuda" ;;
  table1) remat bench --suite gpu --sections table1_measured ${nets:+--networks $nets} --out "$out/table1" ;;
  tradeoff) remat bench --suite gpu --sections tradeoff_measured ${nets:+--networks $nets} --out "$out/tradeoff" ;;
  *) echo "usage: bash bench/gpu.sh runtime|table1|tradeoff OUT [NETS]" >&2; exit 2 ;;
esac
