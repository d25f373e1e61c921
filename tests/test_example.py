"""The worked example (examples/train_gpt2_ddp.py) for a few steps: DDP on 2 CPU processes, bf16
autocast, remat at 40% with a plan cache; its loss curve equals the same script's without remat."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "train_gpt2_ddp.py"


def test_example_runs_and_its_loss_curve_equals_the_plain_one(tmp_path):
    assert (ROOT / "examples" / "data" / "sonnets.txt").stat().st_size > 4000
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "REMAT_PROGRESS": "0"}
    run = subprocess.run([sys.executable, str(SCRIPT), "--compare", "--steps", "3", "--log-every", "1",
                          "--plan-cache", str(tmp_path / "plans")],
                         capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
    assert "loss curves equal: True (3 steps, largest difference 0)" in out
    assert "budget" in out and "(40.0% of vanilla)" in out  # rank 0's report
    assert "plan cache: stored" in out
    assert len(list((tmp_path / "plans").glob("*.json"))) == 1
