#!/usr/bin/env bash
# The held-out benchmark on a GPU lent for 15 minutes of device time.
#
#   bash bench/gpu_session.sh eager OUT      # ~6.5 min: bf16, vanilla / per-block / SAC / remat eager
#   MODELS="gpt2 llama" bash bench/gpu_session.sh inductor OUT   # ~6 min: bf16, torch.compile b=1 / remat inductor
#   MODELS="vit resnet" bash bench/gpu_session.sh inductor OUT   # ~8-9 min (ResNet-152's compile alone: 127 s;
#                                                                give the call timeout_s 590)
#
# On an H100 (feed18f, bench/results/compiled_h100/*_feed18f) eager took 383 s for all four models. On an H200
# (15d59f3, bench/results/compiled_h200/) inductor took 342 s for GPT-2 + Llama (GPT-2 then failed: fixed) and
# 155 / 121 s for GPT-2 / ViT alone (LIMIT=130 / 95); "100%" rows are cut by the limit on GPT-2 and Llama.
# 2026-11-29 (3dd9cdf, H200, 753 device seconds): the inductor gap probe on Llama (402 s), overhead.py GPT-2 and
# the cost benchmark (148 s), eager GPT-2 + Llama with LIMIT=60 (154 s); results under bench/results/
# {gpu_probe_h200,costs_cuda_h200_3dd9cdf,compiled_h200/eager_3dd9cdf}.
# Next session (15 device minutes), two calls:
#   1. python3 bench/gpu_probe/inductor_gap.py OUT/g llama (~6-7 min, timeout_s 540): at torch.compile's peak,
#      remat's plan is now expected to be torch.compile's own partition (0b8d1fe weighs it in fused seconds,
#      7a7f0a9 with what each saves written and read back; its "100%" ran 1.014x), with inductor's own horizontal
#      fusion (25f87d8) and profiled costs (cost="auto");
#      at "50%" (1.156x on 15d59f3) whether fused kernels of at most 16 buffers split the recomputed residual
#      stream's persistent reduction (2.26 ms on 3dd9cdf) and give the time back; OUT/g/plan.txt and kernels.txt
#      say what each plan recomputes and what the slowest new kernels are made of;
#   2. MODELS="vit resnet" LIMIT=70 bash bench/gpu_session.sh eager OUT (~4-5 min; never run on an H200), or
#      MODELS=resnet LIMIT=250 bash bench/gpu_session.sh inductor OUT (~6 min, never run on inductor);
#   3. if minutes are left: BUDGETS="100%,50%" python3 bench/gpu_probe/overhead.py OUT/o gpt2 (~1.5 min): eager
#      "50%" on GPT-2 measured twice its predicted recomputation (9.6 against 4.78 ms on 3dd9cdf); its kernels
#      against vanilla's and its enqueue time say whether the rest is device work or the CPU falling behind.
# Issue 13's GPU cost benchmark ran once (profile best: 1.043x against flops 1.086x, roofline 1.094x); again with
# ResNet-18: python3 bench/bench_costs.py --device cuda --size gpu --dtype bf16 --models resnet18,mistral \
#   --budgets 0.7,0.5 --repeats 5 --out OUT
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
    # --grads-rng inductor: no second compile per method for the gradient check (device minutes are few;
    # the CPU runs compare gradients under eager's dropout masks)
    python3 bench/bench_compiled.py --device "${DEVICE:-cuda}" --models "$model" --dtypes "${DTYPES:-bf16}" --steps 10 \
      --grads-rng inductor --methods "$methods" --time-limit "$limit" "${extra[@]}" ${EXTRA:-} --out "$work/$model" || echo "[$model] exited $?"
  done
} 2>&1 | tee "$out/$mode.log"
tar -czf "$out/$mode.tar.gz" -C "$work" .
