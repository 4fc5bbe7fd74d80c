"""Sweeps on an existing Dask cluster and through a served Prefect deployment.

The cluster is a real ``dask scheduler`` + two ``dask worker`` processes found through a
scheduler file (the ``dask_cluster`` fixture); the Prefect server is the session's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import xarray as xr
from conftest import TOKENSWEEP, api, output_cube, reference_cube, the_flow_run_of_store, wait_for_task_runs

from tokensweep.pipeline.store.cube import read_status
from tokensweep.pipeline.store.failures import errors_dir
from tokensweep.pipeline.store.layout import DONE, FAILED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # real servers and clusters: `pytest -m slow`


def wait_for(check, timeout: float, what: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def test_sweep_on_an_existing_cluster_via_scheduler_file(dask_cluster, prefect_server, tiny_spec,
                                                          write_spec, tmp_path, cli):
    store = tmp_path / "cluster.zarr"
    result = cli("run", write_spec(tiny_spec), "--store", store,
                 "--scheduler-file", dask_cluster.scheduler_file, "--no-progress")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "computed 12 of 12 partitions" in result.stdout
    xr.testing.assert_identical(output_cube(store), reference_cube(tiny_spec, tmp_path / "ref.zarr"))

    attrs = xr.open_zarr(store).attrs  # consolidated metadata, re-written with the provenance
    assert attrs["worker_hosts"] == [socket.gethostname()]
    assert attrs["completed_at"] >= attrs["created_at"]

    # the workers (started without PREFECT_API_URL) reported to the session's server
    # (this test's flow run: the only one on the session's server with this test's store)
    run = the_flow_run_of_store(prefect_server, store)
    assert run["name"] == f"tiny @ {store}" and run["state_type"] == "COMPLETED", run
    partitions_completed = lambda runs: sum(  # noqa: E731
        r["name"].startswith("beta=") and r["state_type"] == "COMPLETED" for r in runs) == 12
    runs = wait_for_task_runs(prefect_server, run["id"], partitions_completed)
    partitions = [r for r in runs if r["name"].startswith("beta=")]
    assert len(partitions) == 12 and all(r["state_type"] == "COMPLETED" for r in partitions), \
        [(r["name"], r["state_type"]) for r in runs]
    assert len({r["name"] for r in partitions}) == 12  # one task run per partition
    assert "beta=2 d=3 n=2 traj=5:10" in {r["name"] for r in partitions}


@pytest.mark.slow
def test_ui_retry_of_a_failed_flow_run_redoes_only_the_failed_partition(
        dask_cluster, prefect_server, tiny_spec, tmp_path):
    store = tmp_path / "served.zarr"
    dask_cluster.fail_file.write_text("7")
    log = open(tmp_path / "serve.log", "wb")
    serve = subprocess.Popen([TOKENSWEEP, "serve", "--name", "retry-test",
                              "--scheduler-file", str(dask_cluster.scheduler_file)],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, "NUMBA_NUM_THREADS": "1",
                                  "PREFECT_RUNNER_POLL_FREQUENCY": "1"})
    try:
        def deployment():
            try:
                return api(prefect_server, "/deployments/name/sweep/retry-test")
            except urllib.error.HTTPError:
                return None

        deployment_id = wait_for(deployment, 60, "the served deployment")["id"]
        run_id = api(prefect_server, f"/deployments/{deployment_id}/create_flow_run",
                     {"parameters": {"spec": tiny_spec, "store": str(store)}})["id"]

        def final_state():
            state = api(prefect_server, f"/flow_runs/{run_id}")["state_type"]
            return state if state in {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"} else None

        assert wait_for(final_state, 120, "the first flow run") == "FAILED"
        status = read_status(store)
        assert status[7] == FAILED and (np.delete(status, 7) == DONE).all()
        assert "injected failure in partition 7" in json.loads((errors_dir(store) / "7.json").read_text())["error"]
        with xr.open_zarr(store) as ds:
            before = ds[["started", "finished"]].load()

        dask_cluster.fail_file.unlink()  # the cause is fixed; now Retry as the UI does
        api(prefect_server, f"/flow_runs/{run_id}/set_state", {
            "state": {"type": "SCHEDULED", "name": "AwaitingRetry", "message": "Retry from the UI"},
            "force": True})
        assert wait_for(final_state, 120, "the retried flow run") == "COMPLETED", \
            (tmp_path / "serve.log").read_text()[-3000:]
    finally:
        dask_cluster.fail_file.unlink(missing_ok=True)
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=30)

    assert (read_status(store) == DONE).all()
    assert not (errors_dir(store) / "7.json").exists()
    with xr.open_zarr(store) as ds:
        after = ds[["started", "finished"]].load()
    changed = (after.started != before.started).values.reshape(-1)
    assert changed.nonzero()[0].tolist() == [7]  # the others were not touched
    xr.testing.assert_identical(output_cube(store), reference_cube(tiny_spec, tmp_path / "ref.zarr"))
    assert api(prefect_server, f"/flow_runs/{run_id}")["run_count"] == 2
