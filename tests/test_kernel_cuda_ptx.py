"""The device kernels compile for a real GPU: PTX for compute capability 9.0 through NVIDIA's
NVVM, on the CPU (tests/integration/cuda_ptx.py). The simulator, which every other device test
uses, runs the kernels as Python and accepts what NVVM would refuse; this is the check that a
kernel change still builds for the card before a GPU is lent to measure it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba_cuda")

SCRIPT = Path(__file__).parent / "integration" / "cuda_ptx.py"
MISSING = 3  # cuda_ptx.MISSING


@pytest.mark.slow  # an interpreter of its own: numba.cuda must be imported with the simulator off
@pytest.mark.timeout(300)
def test_every_device_kernel_compiles_to_ptx_for_sm_90():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=280)
    if done.returncode == MISSING:
        pytest.skip(done.stdout.strip())
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and [r["ok"] for r in results] == [True] * 3, done.stdout + done.stderr
    assert [r["kernel"] for r in results] == ["thread 4x4", "thread 32x64", "warp"]
    assert all(r["target"] == "sm_90" and r["entries"] == 1 for r in results), results
