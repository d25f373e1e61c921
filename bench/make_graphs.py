"""Write seed 000's abstract graphs of the zoo networks to bench/graphs/<name>.json.

Batch sizes are seed 000 Table 1's (ResNet50 96, ResNet152 48, VGG19 64, DenseNet161 32,
GoogLeNet 256, U-Net 8, PSPNet 2), plus DenseNet201 (seed 003's batch 16) and ResNet200
(seed 004 Table 1's model, batch 32 as seed 002 §5.2) for the other benchmarks. Costs follow
seed 000 (10 per convolution, 1 otherwise); mem is bytes of each op's float32 output.
The graphs are built on the meta device: no activation memory, a few seconds in all.

    .venv/bin/python bench/make_graphs.py            # all of them
    .venv/bin/python bench/make_graphs.py unet vgg19 # some
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from remat import zoo

OUT = Path(__file__).resolve().parent / "graphs"

# file name -> (zoo name, batch, options)
GRAPHS: dict[str, tuple[str, int, dict]] = {
    "resnet50": ("resnet50", 96, {}),
    "resnet152": ("resnet152", 48, {}),
    "vgg19": ("vgg19", 64, {}),
    "densenet161": ("densenet161", 32, {}),
    "googlenet": ("googlenet", 256, {}),
    "googlenet_nobn": ("googlenet", 256, {"bn": False}),  # the 2015 net, closest to seed 000's #V 134
    "unet": ("unet", 8, {}),
    "pspnet": ("pspnet", 2, {}),
    "densenet201": ("densenet201", 16, {}),
    "resnet200": ("resnet", 32, {"depth": 200}),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"graphs to write (default: all of {', '.join(GRAPHS)})")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in GRAPHS]
    if unknown:
        parser.error(f"unknown graph(s) {unknown}; choose from {', '.join(GRAPHS)}")
    OUT.mkdir(exist_ok=True)
    for file_name in args.names or GRAPHS:
        name, batch, options = GRAPHS[file_name]
        start = time.perf_counter()
        g = zoo.graph(name, batch=batch, **options)
        g.name = file_name
        path = OUT / f"{file_name}.json"
        g.save(path)
        print(f"{file_name:12s} batch {batch:4d}  #V {len(g):4d}  activations {g.total_mem() / 2**30:6.2f} GiB  "
              f"{path.stat().st_size / 1024:6.0f} KiB  {time.perf_counter() - start:5.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
