"""A local Dask cluster the user starts as a service and keeps between runs, the way the
Prefect server is.

    $ tokensweep cluster start --workers 2   # a scheduler and 2 single-threaded workers, detached
    $ tokensweep run SPEC                    # uses it: no worker start-up, no close
    $ tokensweep cluster stop

Each new LocalCluster costs a sweep its workers' start (each imports Prefect's task engine,
the pipeline and numba's cached kernels: 2-3 s on a quiet machine, far more on a loaded one)
and their close. `cluster start` launches the one recipe of a local cluster, detached
(``python -m tokensweep.flows.clusters``: `clusters.start_local_cluster` kept until SIGTERM),
with the Prefect server's API, and records it in TOKENSWEEP_HOME. `run` and `rerun` use the
recorded cluster when given no --workers, --scheduler, --scheduler-file or --cluster, while it
answers and was started from the same code (a digest of tokensweep's sources and the Python
that runs them); a cluster that no longer answers, or runs older code, is not used
(`cluster start` replaces it).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import clusters
from .run import ClusterError, resolve_scheduler
from .server import ensure_server, state_dir

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0  # for the cluster to close its workers, before they are killed
SOURCES = ("kernels", "pipeline", "flows")  # the package's code (a checkout may hold a venv)


def record_file() -> Path:
    return state_dir() / "dask-cluster.json"


def scheduler_file() -> Path:
    return state_dir() / "dask-scheduler.json"


def code_digest() -> str:
    """What the workers run: the interpreter and every tokensweep source file (path, size, mtime)."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(sys.executable.encode())
    sources = [*package.glob("*.py"), *(p for sub in SOURCES for p in (package / sub).rglob("*.py"))]
    for path in sorted(sources):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def _record() -> dict | None:
    try:
        return json.loads(record_file().read_text())
    except (OSError, ValueError):
        return None


def running_scheduler() -> str | None:
    """The address of the recorded cluster, if it answers and runs this code; else None."""
    record = _record()
    if not record or record.get("code") != code_digest():
        return None
    try:
        return resolve_scheduler(scheduler_file=str(scheduler_file()), connect_timeout=1.0)
    except ClusterError:
        return None


def start_cluster(workers: int | None = None) -> str:
    """Start (or keep, if it answers and runs this code) the recorded cluster; its address."""
    address = running_scheduler()
    if address:
        return address
    stop_cluster()  # a stale one: gone, or older code
    workers = clusters.local_workers(workers)
    env = {**os.environ, "PREFECT_API_URL": ensure_server()}
    home = state_dir()
    home.mkdir(parents=True, exist_ok=True)
    scheduler_file().unlink(missing_ok=True)
    with open(home / "dask-cluster.log", "ab") as log:
        service = subprocess.Popen(
            [sys.executable, "-m", clusters.__name__, "--workers", str(workers),
             "--scheduler-file", str(scheduler_file())],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    record_file().write_text(json.dumps({"pids": [service.pid], "workers": workers,
                                         "code": code_digest()}))
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and service.poll() is None:
        if scheduler_file().is_file():  # written once all workers are up (clusters.py)
            address = running_scheduler()
            if address:
                return address
        time.sleep(0.2)
    stop_cluster()
    service.wait()
    raise ClusterError(f"the local cluster did not start within {START_TIMEOUT_S:.0f} s: "
                       f"see {home / 'dask-cluster.log'}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (this process's own child, not yet reaped) has stopped
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def stop_cluster() -> bool:
    """Stop the recorded cluster: SIGTERM to its process, which closes its workers; whatever
    of its session is left after STOP_TIMEOUT_S is killed."""
    record = _record()
    record_file().unlink(missing_ok=True)
    stopped = False
    pids = (record or {}).get("pids", [])
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            stopped = True
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while stopped and time.monotonic() < deadline and any(map(_alive, pids)):
        time.sleep(0.1)
    for pid in pids:  # each started in its own session: its forkserver, nannies and workers too
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    scheduler_file().unlink(missing_ok=True)
    return stopped
