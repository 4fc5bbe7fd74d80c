"""Local Dask clusters: the one recipe every path that starts one uses, and the cores it counts.

A sweep's local cluster (`run.early_task_runner`, `serve`'s per-run one through
`run.task_runner`), the boundary search's cluster for all its rounds, and the detached one of
`tokensweep cluster start` (``python -m tokensweep.flows.clusters``, this module's `main`) are
all `start_local_cluster`: single-threaded worker processes (one kernel per process; numba
releases the GIL anyway), thread caps exported before they start, worker-saturation 1.0, the
worker preload, forked from this process's forkserver where one runs (`forkserver.py`).

How many workers by default: `usable_cores`, dask's ``CPU_COUNT``, which honours the process's
CPU affinity and cgroup quota (a 4-core SLURM allocation of a 128-core node counts 4), where
``os.cpu_count()`` counts the node.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from . import forkserver
from .gpus import GPU, GPU_COUNT_ENV

# Partitions are long and uniform: a worker gets its next one only when it is free. The default
# saturation (1.1) sends two to a one-thread worker, so at the end of a sweep one worker can sit
# idle while another has a partition queued.
# IDLE_CONFIG: what distributed does on its own every few milliseconds, for dashboards a sweep
# does not read: each worker samples its threads' stacks every 10 ms (the profile page) and every
# process checks its event loop every 20 ms and its CPU and memory every 500 ms. An idle scheduler
# with two workers used 0.158 of a core with them, 0.036 without (benchmarks/bench_cluster_idle.py);
# `tokensweep cluster start` keeps one waiting for hours. The nanny's memory limit keeps its 100 ms.
IDLE_CONFIG = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
               "distributed.admin.system-monitor.interval": "5s"}
LOCAL_CLUSTER_CONFIG = {"distributed.scheduler.worker-saturation": 1.0, **IDLE_CONFIG}

# Imported by each local worker as it starts (distributed's `preload`): Prefect's task engine and
# the pipeline load while the cluster starts, not when the first partition arrives.
WORKER_PRELOAD = "tokensweep.flows.preload"

# One partition per single-threaded worker process: threads inside a kernel (numba or the BLAS
# behind its np.dot) would only oversubscribe the cores.
THREAD_ENV = ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def dask_environment(config: dict) -> dict[str, str]:
    """Dask settings as the DASK_* variables that a process started elsewhere reads (a worker in a
    batch job, a `dask worker` command): "distributed.admin.tick.interval" is
    DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL."""
    return {"DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value)
            for key, value in config.items()}


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity and cgroup quota, not the machine's."""
    from dask.system import CPU_COUNT

    return CPU_COUNT or 1


def local_workers(workers: int | None, pending: int | None = None, gpus: int = 0) -> int:
    """How many local workers to start: as asked (by default one per usable core, or one per GPU
    for a cuda spec: `gpus`, the GPUs seen here), no more than the `pending` partitions to run."""
    count = workers or gpus or usable_cores()
    return count if pending is None else min(count, pending)


def cap_threads() -> None:
    """THREAD_ENV to 1 unless set: local workers inherit them; numba reads its own on import."""
    for key in THREAD_ENV:
        os.environ.setdefault(key, "1")


def local_cluster_kwargs(workers: int | None = None, preload: bool = True, gpus: int = 0) -> dict:
    kwargs = {
        "n_workers": local_workers(workers, gpus=gpus),
        "threads_per_worker": 1,
        "processes": True,
        "dashboard_address": ":0",
        "preload": [WORKER_PRELOAD] if preload else [],
    }
    if gpus:  # each worker holds one of them (the preload picks which: GPU_COUNT_ENV)
        kwargs["resources"] = {GPU: 1}
    return kwargs


def start_local_cluster(workers: int | None = None, preload: bool = True, gpus: int = 0):
    """A LocalCluster of `workers` single-threaded worker processes (one per usable core by
    default), returned once all are up; forked from this process's forkserver where one runs,
    else spawned. A worker the nanny restarts later (one that died) is spawned. Close it (or use
    it as a context manager): its workers are this process's children. gpus: the GPUs seen here,
    for a cuda spec's run: one worker per GPU by default, each declaring the resource GPU = 1 and
    using the GPU its name picks (`preload.use_one_gpu`)."""
    import dask
    from distributed import LocalCluster

    dask.config.set(LOCAL_CLUSTER_CONFIG)
    method, env = forkserver.worker_start()
    cap_threads()  # after: a cap set since the forkserver started would make worker_start spawn
    if gpus:
        env = {**env, GPU_COUNT_ENV: str(gpus)}
    with dask.config.set({"distributed.worker.multiprocessing-method": method}):
        return LocalCluster(**local_cluster_kwargs(workers, preload, gpus), env=env)


def serve_local_cluster(workers: int | None, scheduler_file: str | Path) -> None:
    """Start a local cluster, write its address to `scheduler_file` (the format of
    ``dask scheduler --scheduler-file``), and keep it until SIGTERM or SIGINT; then close it and
    remove the file. What ``python -m tokensweep.flows.clusters`` runs, detached, for
    `tokensweep cluster start`."""
    signal.signal(signal.SIGTERM, _exit_on_signal)
    path = Path(scheduler_file)
    try:
        with start_local_cluster(workers) as cluster:
            partial = path.with_name(path.name + ".partial")
            partial.write_text(json.dumps({"address": cluster.scheduler_address,
                                           "workers": len(cluster.workers), "pid": os.getpid()}))
            partial.replace(path)  # whole or absent for whoever waits for it
            if hasattr(signal, "pause"):
                signal.pause()
            _sleep_forever()
    except KeyboardInterrupt:
        pass
    finally:
        path.unlink(missing_ok=True)


def _exit_on_signal(signum, frame):
    raise KeyboardInterrupt  # leaves the cluster's block: workers closed, file removed


def _sleep_forever() -> None:
    import time

    while True:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tokensweep.flows.clusters",
                                     description="a local Dask cluster kept until SIGTERM")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--scheduler-file", required=True)
    args = parser.parse_args(argv)
    serve_local_cluster(args.workers, args.scheduler_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
