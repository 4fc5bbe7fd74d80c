"""Nothing is lost under faults, and bad input never gets past the command line.

Real parts on loopback: a worker process killed mid-partition, a partition that raises,
the flow process itself killed mid-sweep, a second writer on a locked store. After the
rerun the cube equals an uninterrupted run bit for bit, and the rerun computed exactly
the partitions that were not done.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import numpy as np
import pytest
import xarray as xr
from conftest import SPECS, TOKENSWEEP, api, output_cube, the_flow_run_of_store
from distributed import Client
from typer.testing import CliRunner

from tokensweep.flows.cli import app
from tokensweep.pipeline.errors import StoreError
from tokensweep.pipeline.spec.load import load_sweep
from tokensweep.pipeline.store.cube import read_partition_table
from tokensweep.pipeline.store.layout import DONE, PENDING
from tokensweep.pipeline.store.lifecycle import prepare_store
from tokensweep.pipeline.store.lock import lock_path, store_lock

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # real servers and clusters: `pytest -m slow`
runner = CliRunner()


def not_done(store) -> int:
    return int((read_partition_table(store, "status") != DONE).sum())


def running(store) -> list[int]:
    """Partitions started but not finished: being computed (or killed while computed)."""
    status, started = read_partition_table(store, "status"), read_partition_table(store, "started")
    return np.flatnonzero((status == PENDING) & ~np.isnan(started)).tolist()


def epoch_seconds(t) -> float:
    """A `started`/`finished` entry (CF-decoded to datetime64, or raw) as seconds since 1970."""
    t = np.asarray(t)
    if np.issubdtype(t.dtype, np.datetime64):
        return float(t.astype("datetime64[ns]").astype("int64")) / 1e9
    return float(t)


def alive(pid: int) -> bool:
    """Is process `pid` still running (a zombie waiting for its parent to reap it is not)?"""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def start_sweep(spec_path, store, scheduler_file, log_path) -> subprocess.Popen:
    return subprocess.Popen(
        [TOKENSWEEP, "run", str(spec_path), "--store", str(store), "--scheduler-file",
         str(scheduler_file), "--no-progress", "--no-report"],
        stdout=open(log_path, "w"), stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "NUMBA_NUM_THREADS": "1"})


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except StoreError:  # the store is being created
            pass
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.mark.slow
def test_killed_worker_and_raising_partition_lose_nothing(
        dask_cluster, prefect_server, slow_spec, slow_reference, write_spec, tmp_path, cli):
    store, log = tmp_path / "faults.zarr", tmp_path / "run.log"
    dask_cluster.fail_file.write_text("9")
    try:
        sweep = start_sweep(write_spec(slow_spec), store, dask_cluster.scheduler_file, log)
        # kill a worker process (SIGKILL, as the OOM killer does) while it computes a partition

        def computing():  # on a worker (nested: pickled by value): (its pid, partition it runs)
            import os
            import sys

            for frame in sys._current_frames().values():
                while frame is not None:
                    if frame.f_code.co_name == "run_partition" and "index" in frame.f_locals:
                        return os.getpid(), int(frame.f_locals["index"])
                    frame = frame.f_back
            return os.getpid(), None

        def kill_one_mid_partition():
            """Kill the worker computing a partition other than 9 (started in the store, not done);
            its index and the kill time once the worker is dead and the partition still not done,
            None if no worker computes one now or the partition got done before the kill landed."""
            if not set(running(store)) - {9}:
                return None
            # a worker restarting after a kill answers with an error: skipped
            now = [r for r in client.run(computing, on_error="return").values() if isinstance(r, tuple)]
            started = running(store)
            candidates = [(pid, i) for pid, i in now if i is not None and i != 9 and i in started]
            if not candidates:
                return None
            pid, index = candidates[0]
            killed_at = time.time()
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: not alive(pid), 30, f"worker process {pid} to die")
            return None if read_partition_table(store, "status")[index] == DONE else (index, killed_at)

        killed = []  # (partition, time of the kill)

        def killed_one() -> bool:
            victim = kill_one_mid_partition()
            killed.extend([victim] if victim else [])
            return victim is not None

        with dask_cluster.client() as client:
            wait_until(lambda: store.exists() and killed_one(), 120,
                       "a partition being computed, to kill its worker mid-partition")
        victim, killed_at = killed[0]
        assert sweep.wait(timeout=240) == 1, log.read_text()
    finally:
        dask_cluster.fail_file.unlink(missing_ok=True)
    output = log.read_text()
    assert "1 partition(s) failed" in output and "partition 9 (beta=2 d=3 n=2 traj=9:12)" in output

    status = cli("status", store)
    assert "12 partitions: 11 done, 0 pending, 1 failed" in status.stdout, status.stdout
    assert (f"failed: partition 9 (beta=2 d=3 n=2 traj=9:12) on {socket.gethostname()}: "
            "RuntimeError: injected failure in partition 9") in status.stdout
    # the partition killed mid-way was not lost: computed again from its start, after the kill
    assert read_partition_table(store, "status")[victim] == DONE
    started, finished = (epoch_seconds(read_partition_table(store, name)[victim]) for name in ("started", "finished"))
    assert killed_at < started < finished, (victim, killed_at, started, finished)

    k = not_done(store)
    rerun = cli("rerun", store, "--scheduler-file", dask_cluster.scheduler_file, "--no-progress",
                "--no-report")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"computed {k} of 12 partitions" in rerun.stdout and k == 1
    xr.testing.assert_identical(output_cube(store), slow_reference)


@pytest.mark.slow
def test_killed_flow_process_then_unlock_and_rerun(
        dask_cluster, prefect_server, slow_spec, slow_reference, write_spec, tmp_path, cli):
    store, log = tmp_path / "killed.zarr", tmp_path / "run.log"
    spec = write_spec(slow_spec)
    sweep = start_sweep(spec, store, dask_cluster.scheduler_file, log)
    wait_until(lambda: store.exists() and 12 - not_done(store) >= 3, 120, "three partitions done")
    sweep.send_signal(signal.SIGKILL)
    sweep.wait(timeout=30)
    # the surviving workers finish the partitions they were executing, and may start queued ones
    # until the scheduler notices the dead client; only when the scheduler holds no task and no
    # worker executes one is the count of partitions not done final
    count_tasks = lambda dask_scheduler: len(dask_scheduler.tasks)  # noqa: E731 (pickled by value)
    executing = lambda dask_worker: len(dask_worker.state.executing)  # noqa: E731

    def quiet(client) -> bool:
        return client.run_on_scheduler(count_tasks) == 0 and not any(client.run(executing).values())

    with Client(scheduler_file=dask_cluster.scheduler_file, timeout=30) as client:
        wait_until(lambda: quiet(client), 60, "the cluster to finish the killed flow's work")
    wait_until(lambda: not running(store), 60, "the running partitions to finish")
    k = not_done(store)
    assert 0 < k < 12

    flow_run = the_flow_run_of_store(prefect_server, store)
    assert flow_run["state_type"] == "RUNNING"  # the killed process never told Prefect
    refused = cli("run", spec, "--store", store, "--scheduler-file", dask_cluster.scheduler_file)
    assert refused.returncode == 2
    # the run that found the stale lock ended the dead flow run in Prefect
    assert f"flow run {flow_run['name']} ({flow_run['id']}) marked Crashed" in refused.stderr
    assert api(prefect_server, f"/flow_runs/{flow_run['id']}")["state_type"] == "CRASHED"
    assert f"being written by another sweep (pid {sweep.pid} on {socket.gethostname()}" in refused.stderr
    assert f"the lock is stale: break it with `tokensweep unlock {store}`" in refused.stderr
    assert "lock is stale" in cli("status", store).stdout
    unlocked = cli("unlock", store)
    assert unlocked.returncode == 0 and f"broke the lock held by pid {sweep.pid}" in unlocked.stdout
    assert "is CRASHED, left as it is" in unlocked.stdout

    rerun = cli("run", spec, "--store", store, "--scheduler-file", dask_cluster.scheduler_file,
                "--no-progress", "--no-report")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"computed {k} of 12 partitions" in rerun.stdout
    xr.testing.assert_identical(output_cube(store), slow_reference)


@pytest.mark.slow
def test_unlock_marks_the_killed_flow_run_crashed(
        dask_cluster, prefect_server, slow_spec, write_spec, tmp_path, cli):
    store, log = tmp_path / "crashed.zarr", tmp_path / "run.log"
    sweep = start_sweep(write_spec(slow_spec), store, dask_cluster.scheduler_file, log)
    wait_until(lambda: store.exists() and running(store), 120, "a partition being computed")
    held = json.loads(lock_path(store).read_text())
    sweep.send_signal(signal.SIGKILL)
    sweep.wait(timeout=30)
    flow_run = the_flow_run_of_store(prefect_server, store)
    assert flow_run["name"] == f"slow @ {store}"  # flow-run names carry the store
    assert held["flow_run_id"] == flow_run["id"] and held["prefect_api"] == prefect_server
    assert flow_run["state_type"] == "RUNNING"

    unlocked = cli("unlock", store)
    assert unlocked.returncode == 0, unlocked.stdout + unlocked.stderr
    assert f"flow run slow @ {store} ({flow_run['id']}) marked Crashed" in unlocked.stdout
    after = api(prefect_server, f"/flow_runs/{flow_run['id']}")
    assert after["state_type"] == "CRASHED" and f"pid {sweep.pid}" in after["state"]["message"]
    # the dead flow's partitions still queued on the shared cluster end before the next test
    count_tasks = lambda dask_scheduler: len(dask_scheduler.tasks)  # noqa: E731 (pickled by value)
    with Client(scheduler_file=dask_cluster.scheduler_file, timeout=30) as client:
        wait_until(lambda: client.run_on_scheduler(count_tasks) == 0, 120, "the cluster to drain")


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "kept.zarr"
    prepare_store(load_sweep(SPECS / "good.yaml"), path)
    return path


def test_second_writer_is_refused_naming_the_owner(store):
    with store_lock(store):
        for args in (["run", str(SPECS / "good.yaml"), "--store", str(store)], ["rerun", str(store)]):
            result = runner.invoke(app, args)
            assert result.exit_code == 2
            assert (f"{store} is being written by another sweep (pid {os.getpid()} on "
                    f"{socket.gethostname()}") in result.output
            assert "wait for it to finish" in result.output
        assert f"locked by pid {os.getpid()}" in runner.invoke(app, ["status", str(store)]).output
    assert not lock_path(store).exists()


def test_stale_lock_is_reported_and_broken_by_unlock(store):
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock_path(store).write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid,
                                            "since": "2026-01-01T00:00:00Z"}))
    status = runner.invoke(app, ["status", str(store)])
    assert status.exit_code == 0
    assert f"locked by pid {dead.pid} on {socket.gethostname()} since 2026-01-01T00:00:00Z; " \
           "that process is gone, so the lock is stale" in status.output
    refused = runner.invoke(app, ["run", str(SPECS / "good.yaml"), "--store", str(store)])
    assert refused.exit_code == 2 and f"break it with `tokensweep unlock {store}`" in refused.output
    unlocked = runner.invoke(app, ["unlock", str(store)])
    assert unlocked.exit_code == 0 and f"broke the lock held by pid {dead.pid}" in unlocked.output
    assert "locked" not in runner.invoke(app, ["status", str(store)]).output
    assert f"{store} was not locked" in runner.invoke(app, ["unlock", str(store)]).output


def _truncate(path):
    path.write_text(path.read_text()[:40])


def _foreign(store):
    import shutil

    import zarr

    shutil.rmtree(store)
    zarr.open_group(store, mode="w", zarr_format=3).attrs["made_by"] = "another tool"


BROKEN_STORES = {  # how the store is broken -> what the one line must say
    "truncated zarr.json": (lambda s: _truncate(s / "zarr.json"), "unreadable store metadata"),
    "truncated status metadata": (lambda s: _truncate(s / "status" / "zarr.json"),
                                  "cannot read `status`"),
    "another tool's store": (_foreign, "is a zarr store but not a tokensweep cube"),
    "no zarr.json": (lambda s: (s / "zarr.json").unlink(), "is not a zarr v3 store"),
}
COMMANDS = {
    "status": lambda s: ["status", s],
    "report": lambda s: ["report", s],
    "rerun": lambda s: ["rerun", s],
    "run": lambda s: ["run", str(SPECS / "good.yaml"), "--store", s],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("broken", sorted(BROKEN_STORES))
def test_broken_store_exits_2_with_one_line(command, broken, store):
    damage, message = BROKEN_STORES[broken]
    damage(store)
    result = runner.invoke(app, COMMANDS[command](str(store)))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")


@pytest.mark.parametrize("args, message", [
    (["rerun", "nowhere.zarr"], "no store at nowhere.zarr"),
    (["unlock", "nowhere.zarr"], "no store at nowhere.zarr and no lock beside it"),
    (["run", str(SPECS / "good.yaml"), "--scheduler-file", "nowhere.json"],
     "scheduler file 'nowhere.json' not found: start one with `dask scheduler --scheduler-file FILE`"),
    (["rerun", "STORE", "--scheduler", "tcp://127.0.0.1:9"], "no Dask scheduler answers at tcp://127.0.0.1:9"),
    (["serve", "--scheduler-file", "nowhere.json"], "scheduler file 'nowhere.json' not found"),
    (["serve", "--scheduler", "a:1", "--scheduler-file", "b"],
     "give either --scheduler or --scheduler-file, not both"),
])
def test_bad_command_line_exits_2_with_one_line(args, message, store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [str(store) if a == "STORE" else a for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")


def test_a_ctrl_c_inside_a_serializer_leaves_the_flow_run_crashed_not_failed(
        prefect_server, tmp_path, monkeypatch):
    """Ctrl-C striking inside a pydantic serializer (as Prefect submits a task) comes out of
    pydantic-core as a PydanticSerializationError; the flow turns it back into the interrupt it
    was, so the run is Crashed ("interrupt"), not Failed with that traceback."""
    from pydantic import BaseModel, field_serializer

    from tokensweep.flows import sweep
    from tokensweep.flows.server import prefect_api

    class Submitted(BaseModel):
        x: int = 0

        @field_serializer("x")
        def _interrupted_here(self, value):
            raise KeyboardInterrupt

    def interrupted_run(*args):
        Submitted().model_dump()

    monkeypatch.setattr(sweep, "_sweep", interrupted_run)
    try:
        Submitted().model_dump()
    except Exception as err:
        assert type(err).__name__ == "PydanticSerializationError" and sweep.interrupted(err)
    store = tmp_path / "interrupted.zarr"
    spec = load_sweep(SPECS / "good.yaml").model_dump(mode="json")
    with prefect_api(prefect_server), pytest.raises(KeyboardInterrupt):
        sweep.sweep_flow(spec=spec, store=str(store), progress=False)
    run = the_flow_run_of_store(prefect_server, store)
    assert run["state_type"] == "CRASHED", run["state"]
    assert "PydanticSerializationError" not in json.dumps(run["state"])
