"""A sweep on a real SLURM: worker jobs through sbatch, one cancelled mid-partition with scancel
(the cluster replaces it and the partition is computed again), then Ctrl-C (every job cancelled),
then a rerun.

Needs the one-node SLURM of `bash tests/integration/slurm/setup.sh` (as root), then
`python -m pytest -q -s -m slurm -n 0` (-s shows the squeue output taken during the run).
The cube after the rerun must equal a local run of the same spec bit for bit, and no
tokensweep job may be left in the queue.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import time

import pytest
import xarray as xr
from conftest import SLOW, TOKENSWEEP, output_cube

from tokensweep.pipeline.errors import StoreError
from tokensweep.pipeline.store.cube import read_partition_table
from tokensweep.pipeline.store.layout import DONE, PENDING

NAME = "slurm-test"
JOB_NAME = f"tokensweep-{NAME}"
BATCH = ["--cluster", "slurm", "--jobs", "2", "--cores", "1", "--memory", "1GB",
         "--walltime", "00:10:00"]


def _node_state() -> str | None:
    if shutil.which("sinfo") is None:
        return None
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "no answer"
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.split() else \
        (out.stderr.strip().splitlines() or ["no node"])[0]


def _skip_reason() -> str | None:
    state = _node_state()
    if state is None:
        return "no SLURM here (sinfo not on PATH): run `bash tests/integration/slurm/setup.sh` as root"
    if state not in ("idle", "mixed", "allocated"):
        return f"the SLURM node is not up (sinfo: {state}): run tests/integration/slurm/setup.sh"
    return None


pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]


@pytest.fixture(autouse=True, scope="session")  # before the Prefect server
def slurm_up():
    """Asked only when a test here runs (not when the quick suite merely collects this file)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)


def squeue() -> str:
    return subprocess.run(["squeue", "-n", JOB_NAME, "-o", "%.8i %.22j %.8u %.2t %.10M %R"],
                          capture_output=True, text=True, timeout=20).stdout


def our_jobs(states: str = "PENDING,RUNNING,CONFIGURING,COMPLETING") -> list[str]:
    out = subprocess.run(["squeue", "-h", "-n", JOB_NAME, "-t", states, "-o", "%i"],
                         capture_output=True, text=True, timeout=20).stdout
    return out.split()


def not_done(store) -> int:
    return int((read_partition_table(store, "status") != DONE).sum())


def running(store) -> list[int]:
    """Partitions started and not finished: being computed now."""
    import numpy as np

    status, started = read_partition_table(store, "status"), read_partition_table(store, "started")
    return np.flatnonzero((status == PENDING) & ~np.isnan(started)).tolist()


def epoch_seconds(t) -> float:
    """A `started` entry (CF-decoded to datetime64, or raw) as seconds since 1970."""
    import numpy as np

    t = np.asarray(t)
    if np.issubdtype(t.dtype, np.datetime64):
        return float(t.astype("datetime64[ns]").astype("int64")) / 1e9
    return float(t)


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (StoreError, OSError, KeyError):  # the store is being created
            pass
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def test_cancelled_job_ctrl_c_and_rerun_give_the_local_cube(tmp_path, write_spec, prefect_server):
    spec = copy.deepcopy(SLOW)
    # 24 partitions of ~2.5 s each on a quiet core (CI runs this beside the slow tier: the local
    # run and the rerun get 600 s): the sweep must outlast the kill, the
    # replacement job's start and the Ctrl-C (8 partitions of 0.15 s ended before it on a quiet machine)
    spec.update(name=NAME, trajectories=36, partition_traj=3,
                time={**SLOW["time"], "layers": 6_000_000})
    total = 24
    spec_path = write_spec(spec)
    # the local run compiles into the jobs' node-local numba cache, ${TMPDIR:-/tmp}/$USER/numba-cache
    env = dict(os.environ)
    cache = f"{env.get('TMPDIR') or '/tmp'}/{env.get('USER') or 'tokensweep'}/numba-cache"
    local_env = {**env, "NUMBA_CACHE_DIR": cache}

    local = subprocess.run([TOKENSWEEP, "run", str(spec_path), "--store", str(tmp_path / "local.zarr"),
                            "--workers", "2", "--no-progress", "--no-report"],
                           capture_output=True, text=True, env=local_env, timeout=600)
    assert local.returncode == 0, local.stdout + local.stderr

    store, log = tmp_path / "slurm.zarr", tmp_path / "run.out"
    shots = []  # squeue output during the run
    try:
        sweep = subprocess.Popen([TOKENSWEEP, "run", str(spec_path), "--store", str(store), *BATCH,
                                  "--no-progress"], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                                 text=True, env=env)
        # both workers busy with a partition: cancelling either job kills one mid-partition
        wait_until(lambda: len(running(store)) == 2 and len(our_jobs("RUNNING")) == 2, 150,
                   "two worker jobs computing a partition each")
        shots.append(("both jobs computing partitions " + str(running(store)), squeue()))
        victims = running(store)
        victim_job = our_jobs("RUNNING")[0]
        killed_at = time.time()
        # SIGKILL, as the OOM killer or a lost node: a plain scancel's SIGTERM leaves the worker
        # KillWait seconds in which it may still finish its partition
        subprocess.run(["scancel", "--signal=KILL", victim_job], check=True, timeout=20)
        wait_until(lambda: victim_job not in our_jobs(), 60, f"job {victim_job} to end")
        shots.append((f"after scancel --signal=KILL {victim_job}", squeue()))
        # the cluster replaces the cancelled job while the sweep goes on
        wait_until(lambda: len(our_jobs("RUNNING")) == 2, 90, "a job replacing the cancelled one")
        shots.append(("replacement running", squeue()))
        # then Ctrl-C: the run stops (exit 130) and cancels its jobs; the rerun does the rest
        assert not_done(store) > 0, "the sweep ended before Ctrl-C: make its partitions longer"
        sweep.send_signal(signal.SIGINT)
        code = sweep.wait(timeout=120)
        output = log.read_text()
        assert code == 130 and "partitions done; run the same command to resume" in output, output
        wait_until(lambda: not our_jobs(), 30, "Ctrl-C to cancel every job")
        shots.append((f"after Ctrl-C (exit {code})", squeue()))
        left = not_done(store)

        rerun = subprocess.run([TOKENSWEEP, "rerun", str(store), *BATCH, "--no-progress", "--no-report"],
                               capture_output=True, text=True, env=env, timeout=600)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        # every job ended with the sweep: cancelled by tokensweep (not by the `finally` below)
        shots.append(("after the rerun", squeue()))
        wait_until(lambda: not our_jobs(), 30, "every tokensweep job to leave the queue")
    finally:
        for title, text in shots:
            print(f"--- squeue: {title}\n{text}", end="")
        subprocess.run(["scancel", "-n", JOB_NAME], timeout=20)  # never leave jobs behind

    print(f"--- first run:\n{output}--- rerun:\n{rerun.stdout}")
    assert left > 0 and f"computed {left} of {total} partitions" in rerun.stdout, rerun.stdout
    status = read_partition_table(store, "status")
    assert (status == DONE).all(), status
    # the partition the cancelled job was computing was computed again, from its start, after it
    started = read_partition_table(store, "started")
    restarted = [i for i in victims if epoch_seconds(started[i]) > killed_at]
    assert restarted, (victims, started, killed_at)
    xr.testing.assert_identical(output_cube(store), output_cube(tmp_path / "local.zarr"))


def test_a_job_slurm_refuses_exits_2_with_one_line(tmp_path, write_spec, prefect_server):
    spec = {**copy.deepcopy(SLOW), "name": NAME}
    store = tmp_path / "refused.zarr"
    result = subprocess.run([TOKENSWEEP, "run", str(write_spec(spec)), "--store", str(store),
                             *BATCH, "--queue", "no-such-partition", "--no-progress"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: sbatch refused the worker job: ") and \
        "invalid partition" in result.stderr.lower() and result.stderr.count("\n") == 1, result.stderr
    assert not our_jobs(), squeue()
