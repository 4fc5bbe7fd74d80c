"""The local cluster service (`tokensweep cluster start|status|stop`, flows/cluster_service.py).

Real parts: the session's Prefect server, a real local cluster (`python -m
tokensweep.flows.clusters`, detached) started by the command, the real `tokensweep` as a subprocess. TOKENSWEEP_HOME is the session's temp folder.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import xarray as xr
from conftest import CUDA_TINY, TINY, output_cube, reference_cube


def test_no_record_or_other_code_is_no_running_cluster(tmp_path, monkeypatch):
    from tokensweep.flows import cluster_service

    monkeypatch.setenv("TOKENSWEEP_HOME", str(tmp_path))
    assert cluster_service.running_scheduler() is None
    (tmp_path / "dask-cluster.json").write_text(json.dumps({"pids": [], "code": "older"}))
    assert cluster_service.running_scheduler() is None
    assert cluster_service.code_digest() == cluster_service.code_digest() != "older"


def test_the_started_cluster_serves_cpu_specs_asking_for_no_workers():
    """Its workers declare no GPU: a cuda spec starts its own, one per GPU (docs/cluster.md)."""
    from tokensweep.flows.cli.run import service_serves
    from tokensweep.pipeline.spec.load import parse_sweep

    cpu, cuda = parse_sweep(TINY), parse_sweep(CUDA_TINY)
    assert service_serves(cpu, None, None) and not service_serves(cuda, None, None)
    assert not service_serves(cpu, 2, None)  # --workers: a local cluster of its own


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.slow
def test_run_uses_the_started_cluster_until_it_is_stopped_or_stale(
        prefect_server, cli, write_spec, tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("TOKENSWEEP_HOME", str(home))
    spec = write_spec(TINY)
    started = cli("cluster", "start", "--workers", "2")
    try:
        assert started.returncode == 0, started.stderr
        address = started.stdout.strip()
        assert address.startswith("tcp://127.0.0.1:")
        assert cli("cluster", "status").stdout.strip() == address
        assert cli("cluster", "start").stdout.strip() == address  # kept, not a second one

        warm = cli("run", spec, "--store", tmp_path / "warm.zarr", "--no-progress", "--no-report")
        assert warm.returncode == 0, warm.stderr
        assert f"on the cluster at {address}" in warm.stdout
        xr.testing.assert_identical(output_cube(tmp_path / "warm.zarr"),
                                    reference_cube(TINY, tmp_path / "reference.zarr"))
        local = cli("run", spec, "--store", tmp_path / "local.zarr", "--workers", "2", "--no-progress",
                    "--no-report")
        assert local.returncode == 0 and "on 2 local workers" in local.stdout, local.stderr  # its own
        # nor by a cuda spec (the simulator's device): the service's workers hold no GPU
        cuda = cli("run", write_spec(CUDA_TINY), "--store", tmp_path / "cuda.zarr", "--no-progress",
                   "--no-report")
        assert cuda.returncode == 0 and "the cluster at" not in cuda.stdout, cuda.stdout + cuda.stderr

        record = json.loads((home / "dask-cluster.json").read_text())
        pids = record["pids"]
        # started from other code (an upgrade, an edited source): not used, its workers run that code
        (home / "dask-cluster.json").write_text(json.dumps({**record, "code": "older"}))
        assert cli("cluster", "status").stdout.startswith("no local cluster")
        stale = cli("run", spec, "--store", tmp_path / "stale.zarr", "--no-progress", "--no-report")
        assert stale.returncode == 0, stale.stderr  # nor a cluster of its own, for a sweep this small
        assert "the cluster at" not in stale.stdout and "on this process (no cluster)" in stale.stdout
    finally:
        stopped = cli("cluster", "stop")
    assert stopped.stdout.strip() == "stopped"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(map(_alive, pids)):
        time.sleep(0.2)
    assert not any(map(_alive, pids))
    assert cli("cluster", "stop").stdout.strip() == "no local cluster is running"
