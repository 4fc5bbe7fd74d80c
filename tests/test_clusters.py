"""The one recipe for local Dask clusters (flows/clusters.py): the cores it counts, and the
detached cluster of `tokensweep cluster start` (``python -m tokensweep.flows.clusters``)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import dask.system
import pytest

from tokensweep.flows import clusters


def test_workers_default_to_the_usable_cores_not_the_machines(monkeypatch):
    monkeypatch.setattr(dask.system, "CPU_COUNT", 3)  # e.g. a 3-core affinity mask or cgroup quota
    assert clusters.usable_cores() == 3
    assert clusters.local_workers(None) == 3 and clusters.local_workers(None, pending=2) == 2
    assert clusters.local_workers(5, pending=9) == 5
    kwargs = clusters.local_cluster_kwargs()
    assert kwargs["n_workers"] == 3 and kwargs["threads_per_worker"] == 1
    assert kwargs["preload"] == [clusters.WORKER_PRELOAD]


@pytest.mark.slow
def test_the_detached_local_cluster_serves_until_sigterm_then_closes(tmp_path):
    from distributed import Client

    file = tmp_path / "scheduler.json"
    proc = subprocess.Popen([sys.executable, "-m", "tokensweep.flows.clusters", "--workers", "1",
                             "--scheduler-file", str(file)], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(file.read_text())["address"]
        with Client(address, timeout="10s") as client:
            assert list(client.nthreads().values()) == [1]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not file.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_idle_settings_reach_a_process_through_its_environment():
    """`dask_environment` names each setting as dask reads it back from DASK_* variables (what a
    batch job's worker and the tests' `dask worker` get), with its value."""
    import dask.config

    read_back = dask.config.collect_env(clusters.dask_environment(clusters.IDLE_CONFIG))
    for key, value in clusters.IDLE_CONFIG.items():
        assert dask.config.get(key, config=read_back) == value, key
