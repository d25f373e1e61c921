#!/usr/bin/env bash
# Held-out models on a GPU (issue 12): bench/bench_compiled.py at the GPU sizes, one model per call
# (a call has about 8 minutes; each torch.compile budget costs tens of seconds on these models).
# Installs nothing: the machine's python3 must have torch (CUDA build), transformers and matplotlib,
# and timm / torchvision for vit / resnet (else their transformers equivalents are built);
# remat itself is taken from src/.
#
#   bash bench/compiled.sh MODEL OUT [DTYPES] [EXTRA...]
#   bash bench/compiled.sh gpt2 OUT                 # fp32 and bf16 -> OUT/gpt2/{results.json,report.md,*.png}
#   bash bench/compiled.sh llama OUT bf16 --methods remat-inductor,compile --time-limit 420
#
# MODEL: gpt2 | llama | vit | resnet. The run stops building new methods after --time-limit seconds
# (default here 400) and still times and writes what it built; results.json is rewritten after every
# method, so a call cut off keeps what finished.
set -u
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
model=${1:?usage: bash bench/compiled.sh MODEL OUT [DTYPES] [EXTRA...]} out=${2:?usage: bash bench/compiled.sh MODEL OUT [DTYPES] [EXTRA...]}
dtypes=${3:-fp32,bf16}
shift $(( $# < 3 ? $# : 3 ))
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
mkdir -p "$out/$model"
python3 bench/bench_compiled.py --device cuda --models "$model" --dtypes "$dtypes" --steps 10 \
  --time-limit 400 --out "$out/$model" "$@"
