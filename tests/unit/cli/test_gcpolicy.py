"""sbemu.cli.gcpolicy: the collector settings `sbemu serve` applies once started."""

from __future__ import annotations

import subprocess
import sys

from sbemu.cli.gcpolicy import THRESHOLDS


def test_tune_for_serving_freezes_startup_and_raises_thresholds() -> None:
    # in a child process: the settings are process-wide and would outlive this test
    code = (
        "import gc\n"
        "from sbemu.cli.gcpolicy import tune_for_serving\n"
        "held = [[i] for i in range(1000)]\n"
        "tune_for_serving()\n"
        "print(gc.get_threshold(), gc.get_freeze_count() >= 1000, gc.get_count()[2])\n"
        "a = []; a.append(a); del a\n"  # a cycle made after: still collected
        "print(gc.collect() >= 1)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == f"{THRESHOLDS} True 0"
    assert out[1] == "True"
