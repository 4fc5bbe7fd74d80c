"""`device: cuda` in a spec, without a GPU: the whole path (spec -> partition -> cube -> report)
under numba-cuda's simulator, the stored spec, and `tokensweep run`'s refusal on local workers
(the model's local_problem) when neither a GPU nor the simulator is there. NUMBA_ENABLE_CUDASIM: as tests/test_kernel_cuda.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402

pytest.importorskip("numba_cuda")

from tokensweep.kernels.lowlevel.philox import device_key  # noqa: E402
from tokensweep.kernels.stochastic.cuda import simulate_stochastic_cuda  # noqa: E402
from tokensweep.pipeline.errors import SpecError  # noqa: E402
from tokensweep.pipeline.seeds import cell_key  # noqa: E402
from tokensweep.pipeline.spec.base import SPEC_ATTR  # noqa: E402
from tokensweep.pipeline.spec.load import parse_sweep  # noqa: E402
from tokensweep.pipeline.store.compat import spec_differences  # noqa: E402

CUDA = {"name": "on-device", "model": "stochastic_transformer", "attention": "sa", "device": "cuda",
        "grid": {"beta": [2.0], "d": [3], "n": 2}, "time": {"T": 2.0, "layers": 10, "checkpoints": 2},
        "trajectories": 5, "seed": 11}


def test_a_cuda_spec_runs_spec_to_report_in_the_simulator(prefect_server, tmp_path):  # slow: a server
    """One partition runs in the flow's process on the (simulated) device; the cube holds the
    device kernel's numbers for the cell's key and trajectories 0..4, the stored spec says cuda."""
    from tokensweep.flows import run

    spec = {**CUDA, "store": str(tmp_path / "cuda.zarr")}
    done = run.run_sweep(spec, spec["store"], workers=1, progress=False)
    assert done["computed"] == 1 and done["failed"] == 0 and Path(done["report"]["report"]).is_file()
    cube = xr.open_zarr(spec["store"])
    coords = {"beta": 2.0, "d": 3, "n": 2}
    want = simulate_stochastic_cuda(device_key(11, cell_key(coords)), range(5), n=2, d=3, beta=2.0,
                                    T=2.0, layers=10, checkpoint_layers=[5, 10])
    for name in ("overlap_min", "cluster_class", "t_hit"):
        got = cube[name].sel(beta=2.0, d=3, n=2)
        got = got.transpose("traj", *[k for k in got.dims if k != "traj"]).values
        np.testing.assert_array_equal(got, want[name])
    assert json.loads(cube.attrs[SPEC_ATTR])["device"] == "cuda"


@pytest.mark.parametrize("model,record", [("stochastic_transformer", ()), ("hybrid", ()),
                                          ("stochastic_transformer", ("gram", "energy")),
                                          ("hybrid", ("overlap_hist",))])
def test_a_cuda_partition_runs_the_device_kernel_for_its_cell_and_trajectories(model, record):
    """A partition of a cuda spec (second block of trajectories, 3..5) in this process: the
    device kernel's numbers for the cell's key and those trajectory indices, with the
    observables the spec records."""
    from tokensweep.kernels.stochastic.cuda import simulate_hybrid_cuda
    from tokensweep.pipeline.execute import simulate_partition
    from tokensweep.pipeline.plan import Plan

    grid = {**CUDA["grid"], "sigma": [0.7]} if model == "hybrid" else CUDA["grid"]
    sweep = parse_sweep({**CUDA, "model": model, "grid": grid, "trajectories": 6, "partition_traj": 3,
                         **({"record": list(record)} if record else {})})
    plan = Plan(sweep)
    part = plan[1]
    assert (part.traj_start, part.traj_stop) == (3, 6)
    coords = plan.coords(part)
    key = device_key(11, cell_key(coords))
    kw = dict(n=2, d=3, beta=2.0, T=2.0, layers=10, checkpoint_layers=[5, 10], record=record)
    want = (simulate_hybrid_cuda(key, [3, 4, 5], sigma=0.7, **kw) if model == "hybrid"
            else simulate_stochastic_cuda(key, [3, 4, 5], **kw))
    got = simulate_partition(sweep, part, plan)
    assert set(record) <= set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_device_is_part_of_the_spec_and_cpu_specs_stay_as_they_were():
    cpu = parse_sweep({**CUDA, "device": "cpu"})
    plain = parse_sweep({k: v for k, v in CUDA.items() if k != "device"})
    assert "device" not in cpu.model_dump() and cpu.canonical() == plain.canonical()
    assert spec_differences(cpu, parse_sweep(CUDA)) == ["device: None -> 'cuda'"]
    for field, value in (("scheme", "sde"), ("qk", "goe")):
        with pytest.raises(SpecError, match=f"^{field}: .*set device: cpu"):
            parse_sweep({**CUDA, field: value})
    with pytest.raises(SpecError, match="^device: 'cuda' runs n from 1 to 32"):
        parse_sweep({**CUDA, "grid": {**CUDA["grid"], "n": 40}})


@pytest.mark.slow  # a fresh interpreter (the variable is read at numba.cuda's first import)
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU is present here")
def test_without_gpu_or_simulator_run_exits_2_with_one_line(tmp_path):
    spec = tmp_path / "cuda.yaml"
    spec.write_text(json.dumps({**CUDA, "store": str(tmp_path / "never.zarr")}))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-m", "tokensweep.flows.cli", "run", str(spec)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "device: cuda" in lines[0] and "NUMBA_ENABLE_CUDASIM=1" in lines[0]
    assert not (tmp_path / "never.zarr").exists()


@pytest.mark.slow  # a fresh interpreter, as above
def test_without_gpu_or_simulator_the_python_api_refuses_before_any_compute(tmp_path):
    """`tokensweep.run` applies the CLI's limit: local workers cannot run a cuda spec here."""
    code = ("import json, sys, tokensweep\n"
            "from tokensweep.pipeline.errors import SpecError\n"
            "try:\n"
            f"    tokensweep.run({dict(CUDA, store=str(tmp_path / 'never.zarr'))!r}, progress=False)\n"
            "except SpecError as err:\n"
            "    print(err); sys.exit(2)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "device: cuda" in out.stdout and "NUMBA_ENABLE_CUDASIM=1" in out.stdout
    assert not (tmp_path / "never.zarr").exists()


def test_plan_of_a_cuda_spec_times_the_device_and_counts_one_worker_per_gpu(tmp_path, capsys,
                                                                            monkeypatch):
    """`tokensweep plan` times a partition of the device kernel (the simulator's, here: one
    device) and spreads the partitions over one local worker per GPU, not per core."""
    from tokensweep.flows.cli import main

    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "cuda.json"
    spec.write_text(json.dumps({**CUDA, "trajectories": 8, "partition_traj": 2}))
    assert main(["plan", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "GPU time: ~" in out and "on 1 local GPU worker, plus" in out, out
    assert "core time" not in out, out
