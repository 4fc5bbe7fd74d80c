"""Choosing where a sweep runs: a local Dask cluster by default, any cluster by address.

The Prefect API URL and the per-worker settings go into the environment before any
worker process starts, so every worker reports to the same server. Workers of an
existing cluster started elsewhere get the API URL through a worker plugin (set in
their environment, for this and any later worker); Prefect also carries it to each
task in the serialized settings context.
"""

from __future__ import annotations

import json
import os
import socket
from urllib.parse import urlparse

from .server import ensure_server

SCHEDULER_HINT = ("start one with `dask scheduler --scheduler-file FILE` (see docs/cluster.md), "
                  "or leave out --scheduler/--scheduler-file to use a local cluster")
# What Prefect needs on every worker; NUMBA_* only helps before numba is imported there.
WORKER_ENV_KEYS = ("PREFECT_API_URL", "PREFECT_SERVER_ANALYTICS_ENABLED")


class ClusterError(ValueError):
    """A Dask cluster that cannot be used as asked; the message says why and what to do."""


def resolve_scheduler(scheduler: str | None = None, scheduler_file: str | None = None,
                      connect_timeout: float = 5.0) -> str | None:
    """The address of an existing scheduler (None: start a local cluster); checks it answers."""
    if scheduler and scheduler_file:
        raise ClusterError("give either --scheduler or --scheduler-file, not both")
    if scheduler_file:
        try:
            with open(scheduler_file) as f:
                scheduler = json.load(f)["address"]
        except OSError:
            raise ClusterError(f"scheduler file {scheduler_file!r} not found: {SCHEDULER_HINT}") from None
        except (ValueError, KeyError, TypeError):
            raise ClusterError(f"scheduler file {scheduler_file!r} has no scheduler address "
                               f"(not written by `dask scheduler --scheduler-file`?): "
                               f"{SCHEDULER_HINT}") from None
    if not scheduler:
        return None
    url = urlparse(scheduler if "://" in scheduler else f"tcp://{scheduler}")
    try:
        with socket.create_connection((url.hostname, url.port or 8786), timeout=connect_timeout):
            pass
    except (OSError, ValueError, TypeError):
        raise ClusterError(f"no Dask scheduler answers at {scheduler}: {SCHEDULER_HINT}") from None
    return scheduler


# Partitions are long and uniform: a worker gets its next one only when it is free. The default
# saturation (1.1) sends two to a one-thread worker, so at the end of a sweep one worker can sit
# idle while another has a partition queued.
LOCAL_CLUSTER_CONFIG = {"distributed.scheduler.worker-saturation": 1.0}


def task_runner(workers: int | None = None, scheduler: str | None = None):
    """A DaskTaskRunner on an existing scheduler, or on a new LocalCluster of `workers` processes."""
    import dask
    from prefect_dask import DaskTaskRunner

    if scheduler:
        return DaskTaskRunner(address=scheduler)
    dask.config.set(LOCAL_CLUSTER_CONFIG)
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        cluster_kwargs={
            "n_workers": workers or os.cpu_count() or 1,
            "threads_per_worker": 1,  # one kernel per process: numba releases the GIL anyway
            "processes": True,
            "dashboard_address": ":0",
        },
    )


def point_workers_at(scheduler: str, env: dict[str, str]) -> None:
    """Export `env` on every worker of the cluster at `scheduler`, now and when they join."""
    from distributed import Client
    from distributed.diagnostics.plugin import WorkerPlugin

    class WorkerEnvironment(WorkerPlugin):
        name = "tokensweep-environment"

        def __init__(self, values):
            self.values = values

        def setup(self, worker):
            os.environ.update(self.values)

    with Client(scheduler, timeout="10s") as client:
        client.register_plugin(WorkerEnvironment(env))


def prepare_environment(scheduler: str | None) -> str:
    """One Prefect API for the flow and its workers; returns its URL."""
    api_url = ensure_server()
    # One partition per single-threaded worker process: threads inside a kernel (numba or the
    # BLAS behind its np.dot) would only oversubscribe the cores. Local workers inherit these.
    for key in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(key, "1")
    if scheduler:
        point_workers_at(scheduler, {k: os.environ[k] for k in WORKER_ENV_KEYS if k in os.environ})
    return api_url


def run_sweep(spec: dict, store: str, *, workers: int | None = None, scheduler: str | None = None,
              scheduler_file: str | None = None, failed_only: bool = False,
              progress: bool = True) -> dict:
    """Run the sweep flow against one Prefect server (started here if none is configured)."""
    scheduler = resolve_scheduler(scheduler, scheduler_file)
    api_url = prepare_environment(scheduler)
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from .sweep import sweep_flow

    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        return sweep_flow.with_options(task_runner=task_runner(workers, scheduler))(
            spec=spec, store=store, failed_only=failed_only, progress=progress)
