"""Choosing where a sweep runs: a local Dask cluster by default, any cluster by address.

The Prefect API URL and the per-worker settings go into the environment before any
worker process starts, so every worker reports to the same server. Workers of an
existing cluster started elsewhere get the API URL through a worker plugin (set in
their environment, for this and any later worker); Prefect also carries it to each
task in the serialized settings context.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from urllib.parse import urlparse

from . import forkserver
from .clusters import WORKER_PRELOAD, cap_threads, local_workers, start_local_cluster
from .gpus import gpus_for
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


def start_worker_imports(spec: dict) -> None:
    """Start the forkserver local workers will fork from, importing what they need and loading
    the kernels of the sweep `spec` (`forkserver.py`): as soon as a run knows it will start a
    local cluster, before it imports Prefect and asks for its server. The thread caps come
    first: numba reads its own on import."""
    cap_threads()
    # "__main__": the command's own module too, which each fork would otherwise import again
    forkserver.start(["__main__", WORKER_PRELOAD], spec)


def task_runner(workers: int | None = None, scheduler: str | None = None):
    """A DaskTaskRunner on an existing scheduler, or on a new local cluster of `workers` processes
    for each flow run (`served_local_cluster`)."""
    from prefect_dask import DaskTaskRunner

    if scheduler:
        return DaskTaskRunner(address=scheduler)
    return DaskTaskRunner(cluster_class=served_local_cluster, cluster_kwargs={"workers": workers})


def served_local_cluster(workers: int | None = None):
    """The local cluster of one flow run of `task_runner` (`tokensweep serve`), as `tokensweep run`
    would start it for the run's spec: for a cuda spec one worker per GPU seen here, each holding
    its own. The spec is read back from Prefect (the flow run's parameters): the runner starts
    its cluster before the flow run's context holds them. A plain module function, as the
    runner is pickled with the flow."""
    from prefect.runtime import flow_run

    gpus = gpus_for(flow_run.parameters.get("spec"))
    return start_local_cluster(local_workers(workers, gpus=gpus), gpus=gpus)


# At most this many partitions left: no cluster, they run in the flow's process (in_process.py)
IN_PROCESS_PARTITIONS = 1
# Nor for this little work, unless workers are asked for (`attention_work`: 5e6 is ~0.1 s of the
# kernels on one core), where a local cluster's start costs ~8 s of CPU and ~3 s of a tiny
# sweep's wall time on 2 cores
IN_PROCESS_WORK = 5e6


def attention_work(spec, pending: int) -> float:
    """trajectories x layers x n^2 d of `pending` partitions of the sweep `spec` (a dict or a
    parsed spec), at its grid's largest n, d and layers: the work of the attention step. Infinite
    for a model with no time grid (a real network, whose layers cost far more than that)."""
    from ..pipeline.spec.load import parse_sweep

    sweep = parse_sweep(spec) if isinstance(spec, dict) else spec
    time = getattr(sweep, "time", None)
    if time is None:
        return math.inf
    axes = sweep.axes
    n, d = max(axes.get("n", (2,))), max(axes.get("d", (1,)))
    layers = max(axes.get("layers", (time.layers,)))
    return float(pending) * sweep.partition_traj * layers * n * n * d


def runs_in_process(pending: int, spec=None, workers: int | None = None) -> bool:
    """Whether a local run with `pending` partitions to run starts no cluster: a store with at
    most IN_PROCESS_PARTITIONS left runs them in the flow's process (a finished sweep's resume
    stays cheap), and so does a sweep `spec` of at most IN_PROCESS_WORK when no number of
    `workers` is given (the same numbers wherever a partition runs)."""
    if pending <= IN_PROCESS_PARTITIONS:
        return True
    return workers is None and spec is not None and attention_work(spec, pending) <= IN_PROCESS_WORK


@contextmanager
def early_task_runner(workers: int | None, pending: int, spec=None):
    """A DaskTaskRunner whose LocalCluster starts now, in the background, while this process
    imports Prefect and creates the flow run (the runner waits for it at the first task); the
    cluster is closed on leaving the block, whatever happened. No more workers than the
    `pending` partitions of `spec`; none where they run in this process (`runs_in_process`)."""
    if runs_in_process(pending, spec, workers):
        from .in_process import InProcessTaskRunner

        yield InProcessTaskRunner()
        return
    from prefect_dask import DaskTaskRunner

    global _starting
    with ThreadPoolExecutor(1, thread_name_prefix="local-cluster") as pool:
        # forked from run_sweep's forkserver where it started one, else spawned
        gpus = gpus_for(spec)  # one worker each
        _starting = starting = pool.submit(start_local_cluster, local_workers(workers, pending, gpus),
                                           gpus=gpus)
        try:
            yield DaskTaskRunner(cluster_class=started_local_cluster)
        finally:
            if starting.exception() is None:
                starting.result().close()  # no-op when the runner closed it already
            _starting = None


_starting = None  # the LocalCluster early_task_runner is starting (one flow run per process)


def started_local_cluster():
    """The cluster class of early_task_runner's DaskTaskRunner: waits for the cluster started
    in the background. A plain module function, as the runner is pickled with the flow."""
    if _starting is None:
        raise RuntimeError("no local cluster is being started in this process")
    return _starting.result()


def partitions_to_run(spec: dict, store: str, failed_only: bool = False) -> int:
    """How many partitions a run of `spec` on `store` computes (`lifecycle.partitions_to_run`):
    what decides where they run, and a cap on the workers worth starting."""
    from ..pipeline.spec.load import parse_sweep
    from ..pipeline.store import lifecycle

    return lifecycle.partitions_to_run(parse_sweep(spec), store, failed_only)


def point_workers_at(scheduler: str, env: dict[str, str]) -> None:
    """Export `env` on every worker of the cluster at `scheduler`, now and when they join."""
    from distributed import Client
    from distributed.diagnostics.plugin import WorkerPlugin

    class WorkerEnvironment(WorkerPlugin):
        name = "tokensweep-environment"

        def __init__(self, values):
            self.values = values

        def setup(self, worker):
            moved = os.environ.get("PREFECT_API_URL") != self.values.get("PREFECT_API_URL")
            os.environ.update(self.values)
            if moved:
                # Prefect keeps one events worker per process, bound to the API of the first flow
                # that used it: after a sweep of another server (a long-lived cluster), task-run
                # states would go to that one. Stopped, the next event starts one for this API.
                from prefect.events.worker import EventsWorker

                return EventsWorker.drain_all(timeout=5)  # awaited by distributed in a running loop

    with Client(scheduler, timeout="10s") as client:
        client.register_plugin(WorkerEnvironment(env))


def prepare_environment(scheduler: str | None) -> str:
    """One Prefect API for the flow and its workers; returns its URL."""
    api_url = ensure_server()
    cap_threads()
    if scheduler:
        point_workers_at(scheduler, {k: os.environ[k] for k in WORKER_ENV_KEYS if k in os.environ})
    return api_url


def run_sweep(spec: dict, store: str, *, workers: int | None = None, scheduler: str | None = None,
              scheduler_file: str | None = None, failed_only: bool = False,
              progress: bool = True, report: bool = True) -> dict:
    """Run the sweep flow against one Prefect server (started here if none is configured);
    `report=False` skips the report (the rounds of `tokensweep boundary`)."""
    scheduler = resolve_scheduler(scheduler, scheduler_file)
    pending = None if scheduler else partitions_to_run(spec, store, failed_only)
    if pending is not None and not runs_in_process(pending, spec, workers):
        start_worker_imports(spec)  # before Prefect's imports and its server: the workers import beside
    api_url = prepare_environment(scheduler)
    with contextlib.ExitStack() as stack:
        runner = task_runner(workers, scheduler) if scheduler else \
            stack.enter_context(early_task_runner(workers, pending, spec))
        from prefect.settings import PREFECT_API_URL, temporary_settings

        from .sweep import sweep_flow

        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            return sweep_flow.with_options(task_runner=runner)(
                spec=spec, store=store, failed_only=failed_only, progress=progress, report=report)
