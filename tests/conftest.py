"""Shared fixtures, real components only.

* ``tiny_spec`` / ``write_spec``: small valid sweeps as dicts and YAML files.
* ``dask_client``: a real ``distributed`` LocalCluster of two worker processes on loopback.
* ``prefect_server``: one real ``prefect server start`` (SQLite in a temp PREFECT_HOME) for
  the session; yields its API URL and exports it, as the CLI would.
"""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

SPECS = Path(__file__).parent / "specs"
BIN = Path(sys.executable).parent

TINY = {
    "name": "tiny",
    "model": "stochastic_transformer",
    "attention": "sa",
    "grid": {"beta": [0.5, 2.0], "d": [3, 4], "n": 2},
    "time": {"T": 2.0, "layers": 200, "checkpoints": 4},
    "trajectories": 12,
    "partition_traj": 5,
    "seed": 11,
}


@pytest.fixture
def tiny_spec() -> dict:
    return copy.deepcopy(TINY)


@pytest.fixture
def write_spec(tmp_path):
    def write(spec: dict, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(spec))
        return path

    return write


@pytest.fixture(scope="session")
def dask_client():
    from distributed import Client, LocalCluster

    env = {"NUMBA_NUM_THREADS": "1"}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0", env=env) as cluster, Client(cluster) as client:
        yield client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
        if proc.poll() is not None:
            pytest.fail(f"prefect server exited: {(home / 'server.log').read_text()[-2000:]}")
    else:
        proc.kill()
        pytest.fail("prefect server did not become healthy in 120 s")
    old = {k: os.environ.get(k) for k in ("PREFECT_API_URL", "PREFECT_HOME")}
    os.environ.update(PREFECT_API_URL=url, PREFECT_HOME=str(home))
    yield url
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    os.killpg(proc.pid, 15)
    proc.wait(timeout=30)
