"""The A/B of ``ab_chains.py`` on a deeper HF Llama: the CPU-size config (hidden 128, batch 4, sequence 128) with
argv[2] layers (default 16) instead of 4, written under $OUT/deep<layers>. argv: dtype, layers[, rounds]."""
import os
import sys
from pathlib import Path

import transformers

import ab_chains

layers = int(sys.argv[2]) if len(sys.argv) > 2 else 16
os.environ["OUT"] = str(Path(os.environ.get("OUT", ".")) / f"deep{layers}")
Path(os.environ["OUT"]).mkdir(parents=True, exist_ok=True)


class DeepConfig(transformers.LlamaConfig):
    def __init__(self, **kw):
        kw["num_hidden_layers"] = layers
        super().__init__(**kw)


transformers.LlamaConfig = DeepConfig
ab_chains.at_half_vanilla(["ab", "llama", sys.argv[1], *sys.argv[3:]], {"unlimited": ab_chains.unlimited})
