"""The least budget ``remat.optimize`` (eager code, auto) meets, as its refusal of "10%" names it, with
``selective-chains`` among auto's candidates ("new", as committed) and without it ("old", ``plans_eager.old``), on
``remat.bench.architectures`` models from public configs (fp32, one thread), in bytes. argv: models (comma list).
Writes $OUT/floors_eager.json."""
import contextlib
import json
import os
import re
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE)]
import remat  # noqa: E402
from plans_eager import old  # noqa: E402
from remat.bench.architectures import build  # noqa: E402
from remat.errors import InfeasibleError  # noqa: E402
from remat.judge import forget_floors  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    out = []
    for name in sys.argv[1].split(","):
        model, inputs, _ = build(name)
        row = {"model": name}
        for which, ctx in (("new", contextlib.nullcontext), ("old", old)):
            forget_floors()
            try:
                with ctx():
                    remat.optimize(model, inputs, "10%", verify=False)
                row[which] = "met 10%"
            except InfeasibleError as e:
                got = re.findall(r"\((\d+(?:\.\d+)?)%, (\d+) bytes\)", str(e))
                row[which] = int(got[-1][1]) if got else str(e)[:300]  # bytes
        print(json.dumps(row), flush=True)
        out.append(row)
    Path(os.environ.get("OUT", "."), "floors_eager.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
