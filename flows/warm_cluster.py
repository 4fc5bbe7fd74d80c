"""A local Dask cluster kept warm between runs, the way the Prefect server is.

    $ tokensweep cluster start --workers 2   # a scheduler and 2 single-threaded workers, detached
    $ tokensweep run SPEC                    # uses it: no worker start-up, no close
    $ tokensweep cluster stop

Each new LocalCluster costs a sweep its workers' start (each imports Prefect's task engine,
the pipeline and numba's cached kernels: 2-3 s on a quiet machine, far more on a loaded one)
and their close. `cluster start` starts `dask scheduler` and `dask worker` as detached
processes with the rules of tokensweep's own local cluster (one thread and NUMBA_NUM_THREADS=1
per worker, worker-saturation 1.0, the same preload, the same Prefect API), and records them in
TOKENSWEEP_HOME. `run` and `rerun` use the recorded cluster when given no --workers, --scheduler,
--scheduler-file or --cluster, while it answers and was started from the same code (a digest of
tokensweep's sources and the Python that runs them); a cluster that no longer answers, or runs
older code, is not used (`cluster start` replaces it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .clusters import LOCAL_CLUSTER_CONFIG, WORKER_PRELOAD
from .run import ClusterError, resolve_scheduler
from .server import ensure_server, state_dir

START_TIMEOUT_S = 120.0
SOURCES = ("kernels", "pipeline", "flows")  # the package's code (a checkout may hold a venv)
THREAD_ENV = ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


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


def warm_scheduler() -> str | None:
    """The address of the recorded cluster, if it answers and runs this code; else None."""
    record = _record()
    if not record or record.get("code") != code_digest():
        return None
    try:
        return resolve_scheduler(scheduler_file=str(scheduler_file()), connect_timeout=1.0)
    except ClusterError:
        return None


def _executable(name: str) -> str:
    return shutil.which(name, path=str(Path(sys.executable).parent)) or name


def start_cluster(workers: int | None = None) -> str:
    """Start (or keep, if it answers and runs this code) the warm cluster; its address."""
    address = warm_scheduler()
    if address:
        return address
    stop_cluster()  # a stale one: gone, or older code
    workers = workers or os.cpu_count() or 1
    api_url = ensure_server()
    env = {**os.environ, "PREFECT_API_URL": api_url,
           "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION":
               str(LOCAL_CLUSTER_CONFIG["distributed.scheduler.worker-saturation"]),
           **{key: os.environ.get(key, "1") for key in THREAD_ENV}}
    home = state_dir()
    home.mkdir(parents=True, exist_ok=True)
    scheduler_file().unlink(missing_ok=True)
    with open(home / "dask-cluster.log", "ab") as log:
        common = dict(env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                      start_new_session=True)
        scheduler = subprocess.Popen(
            [_executable("dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
             "--dashboard-address", ":0", "--scheduler-file", str(scheduler_file())], **common)
        worker = subprocess.Popen(
            [_executable("dask"), "worker", "--scheduler-file", str(scheduler_file()),
             "--nworkers", str(workers), "--nthreads", "1", "--host", "127.0.0.1",
             "--dashboard-address", ":0", "--preload", WORKER_PRELOAD], **common)
    record_file().write_text(json.dumps({"pids": [scheduler.pid, worker.pid], "workers": workers,
                                         "code": code_digest()}))
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if scheduler.poll() is not None or worker.poll() is not None:
            break
        if scheduler_file().is_file() and _workers_up(workers):
            return warm_scheduler()
        time.sleep(0.5)
    stop_cluster()
    raise ClusterError(f"the warm cluster did not start within {START_TIMEOUT_S:.0f} s: "
                       f"see {home / 'dask-cluster.log'}")


def _workers_up(workers: int) -> bool:
    from distributed import Client

    try:
        address = resolve_scheduler(scheduler_file=str(scheduler_file()), connect_timeout=1.0)
        with Client(address, timeout="5s") as client:
            return len(client.scheduler_info(n_workers=-1)["workers"]) >= workers
    except (ClusterError, OSError, TimeoutError):
        return False


def stop_cluster() -> bool:
    """Stop the recorded cluster's processes (each in its own session: nannies and workers too)."""
    record = _record()
    record_file().unlink(missing_ok=True)
    scheduler_file().unlink(missing_ok=True)
    stopped = False
    for pid in (record or {}).get("pids", [])[::-1]:  # the workers first, then the scheduler
        try:
            os.killpg(pid, signal.SIGTERM)
            stopped = True
        except (ProcessLookupError, PermissionError):
            pass
    return stopped
