#!/usr/bin/env bash
# The held-out benchmark on a GPU lent for 15 minutes of device time.
#
#   bash bench/gpu_session.sh eager OUT      # ~6.5 min: bf16, vanilla / per-block / SAC / remat eager
#   MODELS="gpt2 llama" bash bench/gpu_session.sh inductor OUT   # ~6 min: bf16, torch.compile b=1 / remat inductor
#   MODELS="vit resnet" bash bench/gpu_session.sh inductor OUT   # ~8-9 min (ResNet-152's compile alone: 127 s;
#                                                                give the call timeout_s 590)
#
# On an H100 (feed18f, bench/results/compiled_h100/*_feed18f) eager took 383 s for all four models, and
# inductor with a 45 s limit built only torch.compile (38-127 s per model) and one remat row: the limit
# counts from the model's start, so inductor now gets LIMIT=150 and one call per two models. A session
# of 15 device minutes (a start took about 30 s) fits one of the three calls above plus one more; eager is
# committed for feed18f, so the next session runs the two inductor calls (lengths estimated from the compile
# and plan seconds seen), the second as MODELS=vit with bench/gpu_probe/overhead.py (why the no-recompute
# step costs 1.04-1.05x on the GPU: kernels, or the CPU keeping ahead of them) if under 9 minutes are left.
# Issue 13's GPU cost benchmark, for a later session (12 plans; not yet run on a GPU):
#   python3 bench/bench_costs.py --device cuda --size gpu --dtype bf16 --models gpt2,mistral --budgets 0.7,0.5 --out OUT
#
# Each model runs in its own process with its own --time-limit (no new method is built after it; what
# was built is still timed), so a slow model cannot starve the others. Everything written goes into
# OUT/<mode>.tar.gz (one file: the device tool brings back at most 8), holding per model results.json,
# report.md and the frontier plots, and OUT/<mode>.log. Untar under bench/results/compiled_<gpu>/.
# Installs nothing: python3 must have a CUDA torch, transformers and matplotlib (timm / torchvision
# for vit / resnet, else their transformers equivalents are built). DEVICE=cpu, MODELS, DTYPES and
# EXTRA (more arguments, e.g. "--quick") and LIMIT (seconds per model) override, for a smoke test here.
set -u
mode=${1:?usage: bash bench/gpu_session.sh eager|inductor OUT} out=${2:?usage: bash bench/gpu_session.sh eager|inductor OUT}
case $mode in
  eager) methods=per-block,sac,remat-eager limit=${LIMIT:-70} extra=(--overhead-rounds 10) ;;
  inductor) methods=compile,remat-inductor limit=${LIMIT:-150} extra=(--compile-budgets 1.0 --overhead-rounds 0) ;;
  *) echo "mode must be eager or inductor" >&2; exit 2 ;;
esac
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
work=$(mktemp -d)
mkdir -p "$out"
{
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name())'
  for model in ${MODELS:-gpt2 llama vit resnet}; do
    python3 bench/bench_compiled.py --device "${DEVICE:-cuda}" --models "$model" --dtypes "${DTYPES:-bf16}" --steps 10 \
      --methods "$methods" --time-limit "$limit" "${extra[@]}" ${EXTRA:-} --out "$work/$model" || echo "[$model] exited $?"
  done
} 2>&1 | tee "$out/$mode.log"
tar -czf "$out/$mode.tar.gz" -C "$work" .
