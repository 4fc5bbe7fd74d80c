"""A sweep with one partition left runs in the flow's own process, with a LocalCluster's numbers.

Real parts: the session's Prefect server, a real LocalCluster of worker processes for the
reference path, the real `tokensweep` command for what a user sees (the message, Ctrl-C).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import xarray as xr
from conftest import TOKENSWEEP, output_cube, reference_cube

from tokensweep.pipeline.store.cube import read_status
from tokensweep.pipeline.store.layout import DONE

ONE = {"name": "one", "model": "stochastic_transformer", "attention": "sa",
       "grid": {"beta": [1.5], "d": [3], "n": 2}, "time": {"T": 2.0, "layers": 300, "checkpoints": 3},
       "trajectories": 6, "seed": 5}


def test_one_partition_runs_in_process_with_the_reference_numbers(prefect_server, tmp_path):
    from tokensweep.flows import run

    spec = {**ONE, "store": str(tmp_path / "fast.zarr")}
    with run.early_task_runner(2, run.partitions_to_run(spec, spec["store"])) as runner:
        assert type(runner).__name__ == "InProcessTaskRunner"  # one partition: no cluster
    done = run.run_sweep(spec, spec["store"], workers=2, progress=False)
    assert done["computed"] == 1 and done["failed"] == 0 and Path(done["report"]["report"]).is_file()
    xr.testing.assert_identical(output_cube(spec["store"]),
                                reference_cube(ONE, tmp_path / "reference.zarr"))


@pytest.mark.slow
def test_the_in_process_cube_equals_a_local_clusters(prefect_server, tmp_path, monkeypatch):
    from tokensweep.flows import run

    fast, slow = ({**ONE, "store": str(tmp_path / f"{name}.zarr")} for name in ("fast", "slow"))
    run.run_sweep(fast, fast["store"], workers=2, progress=False, report=False)
    monkeypatch.setattr(run, "IN_PROCESS_PARTITIONS", 0)  # the same sweep on a LocalCluster
    with run.early_task_runner(2, run.partitions_to_run(slow, slow["store"])) as runner:
        assert type(runner).__name__ == "DaskTaskRunner"
    reference = run.run_sweep(slow, slow["store"], workers=2, progress=False, report=False)
    assert reference["computed"] == 1 and reference["failed"] == 0
    xr.testing.assert_identical(output_cube(fast["store"]), output_cube(slow["store"]))


def test_a_finished_store_starts_no_cluster_on_resume(tmp_path):
    from tokensweep.flows.run import early_task_runner, partitions_to_run
    from tokensweep.pipeline.execute import run_partition
    from tokensweep.pipeline.spec.load import parse_sweep
    from tokensweep.pipeline.store.lifecycle import prepare_store

    spec = {**ONE, "partition_traj": 3, "store": str(tmp_path / "s.zarr")}
    sweep = parse_sweep(spec)
    prepare_store(sweep, sweep.store)
    assert partitions_to_run(spec, sweep.store) == 2
    for index in range(2):
        run_partition(sweep, sweep.store, index)
    with early_task_runner(2, partitions_to_run(spec, sweep.store)) as runner:
        assert type(runner).__name__ == "InProcessTaskRunner"


@pytest.mark.slow
def test_ctrl_c_in_an_in_process_partition_exits_130_at_once_and_resumes(
        prefect_server, write_spec, tmp_path):
    # one partition of ~10 s on an idle core (longer under load), running in a thread of the
    # CLI's own process: still running when it is interrupted a second after it started
    spec = write_spec({**ONE, "time": {"T": 2.0, "layers": 25_000_000, "checkpoints": 2},
                       "trajectories": 4})
    store = tmp_path / "one.zarr"
    command = [TOKENSWEEP, "run", str(spec), "--store", str(store)]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "partitions to run" not in _text(f"{store}.log"):
            time.sleep(0.2)
        time.sleep(1.0)  # inside the partition
        assert proc.poll() is None, "the run ended before it was interrupted"
        interrupted = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        waited = time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out + err
    assert "on this process (no cluster)" in out
    assert err.splitlines() == ["interrupted: 0 of 1 partitions done; run the same command to "
                                "resume"], err
    assert waited < 10, f"Ctrl-C waited {waited:.1f} s for the running partition"
    assert not Path(f"{store}.lock").exists()
    assert not (read_status(store) == DONE).any()

    resumed = subprocess.run([*command, "-q"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert resumed.returncode == 0 and resumed.stdout == resumed.stderr == "", resumed.stderr
    assert (read_status(store) == DONE).all()


def _text(path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""



def test_a_tiny_sweep_runs_in_process_unless_workers_are_asked_for():
    from tokensweep.flows.run import IN_PROCESS_WORK, attention_work, runs_in_process

    spec = {**ONE, "partition_traj": 2, "store": "unused.zarr"}  # 3 partitions of 2 x 300 layers
    assert attention_work(spec, 3) == 3 * 2 * 300 * 2**2 * 3
    assert runs_in_process(3, spec) and not runs_in_process(3, spec, workers=2)
    assert runs_in_process(1, spec, workers=2)  # one partition: never a cluster
    big = {**spec, "grid": {**ONE["grid"], "d": [3, 64]}, "trajectories": 2000, "partition_traj": 100}
    assert attention_work(big, 40) > IN_PROCESS_WORK and not runs_in_process(40, big)
    assert not runs_in_process(3)  # the work unknown: a cluster for more than one partition
