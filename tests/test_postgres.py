"""Prefect on PostgreSQL: concurrent sweeps against one server, and a failed flow run retried.

A real PostgreSQL server (`integration.postgres`: Debian's package, a throwaway cluster in a
temporary folder) holds the database of a real Prefect server started by
``tokensweep server start --database postgresql+asyncpg://...``. ``tokensweep serve`` serves the
sweep deployment on an existing Dask cluster; four flow runs of it, launched through the API at
once, write four stores (136 partition task runs). One partition of one sweep is made
to fail (the test hook of `pipeline.testing`), so that flow run fails; it is retried through the
API (state AwaitingRetry, as the UI's Retry does) and ends Completed with its cube complete and
equal to an uninterrupted run. Every task run is counted through the API and in the database.

Run it with ``python -m pytest -q -m postgres`` (skipped, saying why, where PostgreSQL is not
installed: ``apt-get install postgresql``).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import time
from datetime import datetime, timezone

import pytest
import xarray as xr
from conftest import BIN, TINY, api, output_cube, reference_cube, run_tokensweep, wait_for_task_runs
from integration.postgres import PostgresServer, PostgresUnavailable

from tokensweep.pipeline.store.cube import read_status
from tokensweep.pipeline.store.layout import DONE, FAILED

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(900)]

SWEEPS = 4
FAILING = 38  # a partition only the first sweep has: the workers' fault hook fails it everywhere
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def sweep_spec(i: int) -> dict:
    """Small, many partitions: 8 cells x 4 (the first sweep 5) blocks of 5 trajectories."""
    spec = copy.deepcopy(TINY)
    spec.update(name=f"pg{i}", seed=100 + i, trajectories=25 if i == 0 else 20, partition_traj=5,
                grid={"beta": [0.5, 1.0, 2.0, 4.0], "d": [3, 4], "n": 2})
    spec["time"] = {"T": 1.0, "layers": 100, "checkpoints": 2}
    return spec


@pytest.fixture(scope="module")
def postgres():
    try:
        server = PostgresServer.start()
    except PostgresUnavailable as why:
        pytest.skip(f"no PostgreSQL server could be started: {why}")
    yield server
    server.stop()


def is_report(task_run: dict) -> bool:
    return task_run["task_key"].startswith("report") or task_run["name"].startswith("report")


def wait_final(url: str, run_id: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        run = api(url, f"/flow_runs/{run_id}")
        if run["state_type"] in FINAL or time.monotonic() > deadline:
            return run
        time.sleep(2)


def test_concurrent_sweeps_and_a_retried_flow_run_on_postgres(postgres, dask_cluster, tmp_path):
    env = {**os.environ, "TOKENSWEEP_HOME": str(tmp_path / "home"), "NUMBA_NUM_THREADS": "1"}
    for key in ("PREFECT_API_URL", "PREFECT_HOME"):  # a new user's shell: no server configured
        env.pop(key, None)
    started = run_tokensweep("server", "start", "--database", postgres.url(), env_extra=env)
    assert started.returncode == 0, started.stdout + started.stderr
    url = started.stdout.strip()
    server_log = tmp_path / "home" / "prefect-server.log"
    # Prefect's tables are in PostgreSQL, and no SQLite database was made
    assert int(postgres.sql("select count(*) from information_schema.tables where table_name = 'flow_run'")) == 1
    assert not (tmp_path / "home" / "prefect" / "prefect.db").exists()

    serve_log = tmp_path / "serve.log"
    serve = subprocess.Popen([str(BIN / "tokensweep"), "serve", "--scheduler-file",
                              str(dask_cluster.scheduler_file)], env=env, stdout=open(serve_log, "w"),
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not api(url, "/deployments/filter", {}):
            assert serve.poll() is None and time.monotonic() < deadline, serve_log.read_text()
            time.sleep(1)
        deployment = api(url, "/deployments/filter", {})[0]

        stores = [tmp_path / f"pg{i}.zarr" for i in range(SWEEPS)]
        dask_cluster.fail_file.write_text(str(FAILING))
        t0 = time.monotonic()
        runs = [api(url, f"/deployments/{deployment['id']}/create_flow_run",
                    {"parameters": {"spec": sweep_spec(i), "store": str(store)}})
                for i, store in enumerate(stores)]
        final = [wait_final(url, run["id"], 600) for run in runs]
        wall = time.monotonic() - t0
        print(f"\n{SWEEPS} concurrent flow runs ended in {wall:.1f} s")
        dask_cluster.fail_file.unlink()
        assert [r["state_type"] for r in final] == ["FAILED"] + ["COMPLETED"] * (SWEEPS - 1), \
            serve_log.read_text()[-3000:]
        assert [r["name"] for r in final] == [f"pg{i} @ {store}" for i, store in enumerate(stores)]

        # nothing lost: every partition is one completed task run (the failing one: failed)
        partitions = [len(read_status(store)) for store in stores]
        assert partitions == [40, 32, 32, 32]
        def recorded(i):  # every partition's task run in a final state (states arrive as events)
            return lambda rows: sum(not is_report(t) and t["state_type"] in FINAL
                                    for t in rows) >= partitions[i]

        task_runs = [wait_for_task_runs(url, run["id"], recorded(i)) for i, run in enumerate(runs)]
        for i, (store, runs_of_flow) in enumerate(zip(stores, task_runs)):
            states = sorted((t["name"], t["state_type"]) for t in runs_of_flow if not is_report(t))
            assert len(states) == partitions[i], (i, len(states))
            failed = [name for name, state in states if state != "COMPLETED"]
            status = read_status(store)
            if i == 0:
                assert len(failed) == 1 and status[FAILING] == FAILED
                assert int((status == DONE).sum()) == partitions[i] - 1
            else:
                assert failed == [] and (status == DONE).all()
        total = sum(len(t) for t in task_runs)
        in_database = int(postgres.sql("select count(*) from task_run"))
        assert in_database == total  # the same rows, in PostgreSQL (report tasks included)

        # retry the failed flow run through the API, as the UI's Retry does
        retried = api(url, f"/flow_runs/{runs[0]['id']}/set_state", {
            "state": {"type": "SCHEDULED", "name": "AwaitingRetry",
                      "state_details": {"scheduled_time": datetime.now(timezone.utc).isoformat()}},
            "force": True})
        assert retried["status"] == "ACCEPT", retried
        t1 = time.monotonic()
        again = wait_final(url, runs[0]["id"], 300)
        retry_wall = time.monotonic() - t1
        assert again["state_type"] == "COMPLETED" and again["run_count"] == 2, serve_log.read_text()[-3000:]
        assert (read_status(stores[0]) == DONE).all()
    finally:
        os.killpg(serve.pid, signal.SIGINT)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
        run_tokensweep("server", "stop", env_extra=env)
    for log in (serve_log, server_log):
        assert "database is locked" not in log.read_text()
    xr.testing.assert_identical(output_cube(stores[0]),
                                reference_cube(sweep_spec(0), tmp_path / "reference.zarr"))
    print(f"\npostgres: {SWEEPS} concurrent flow runs, {sum(partitions)} partitions, {total} task runs "
          f"({in_database} rows in task_run), {wall:.1f} s wall; retry of the failed run "
          f"{retry_wall:.1f} s; server {url}")


PASSWORD = "Pw-tokensweep-s3cret"  # PostgreSQL's trust authentication lets any password in


def test_no_file_holds_the_database_password(postgres, write_spec, tmp_path):
    """`server start --database URL` with a password, then a sweep on that server: neither
    TOKENSWEEP_HOME (the server's record, its log, its PREFECT_HOME), STORE.log nor any other file
    written holds the password (the server gets the URL through its environment only)."""
    home = tmp_path / "home"
    env = {**os.environ, "TOKENSWEEP_HOME": str(home), "NUMBA_NUM_THREADS": "1"}
    for key in ("PREFECT_API_URL", "PREFECT_HOME"):  # a new user's shell: no server configured
        env.pop(key, None)
    database = postgres.url().replace("://postgres@", f"://postgres:{PASSWORD}@")
    assert PASSWORD in database
    try:
        started = run_tokensweep("server", "start", "--database", database, env_extra=env)
        assert started.returncode == 0, started.stdout + started.stderr
        assert PASSWORD not in started.stdout + started.stderr
        spec = write_spec({**TINY, "grid": {"beta": 1.0, "d": 3, "n": 2}, "trajectories": 5})
        store = tmp_path / "secret.zarr"
        ran = run_tokensweep("run", spec, "--store", store, env_extra=env, cwd=tmp_path)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert PASSWORD not in ran.stdout + ran.stderr
    finally:
        run_tokensweep("server", "stop", env_extra=env)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert (home / "prefect-server.log") in files and store.with_name("secret.zarr.log") in files
    holding = [str(p) for p in files if PASSWORD.encode() in p.read_bytes()]
    assert not holding, f"the database password is written in {holding}"
    record = json.loads((home / "prefect-server.json").read_text()) if (
        home / "prefect-server.json").exists() else {}
    assert PASSWORD not in json.dumps(record)
