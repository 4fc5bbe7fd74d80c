"""Choosing where a sweep runs: a local Dask cluster by default, any cluster by address.

The Prefect API URL and the per-worker settings go into the environment before any
worker process starts, so every worker reports to the same server.
"""

from __future__ import annotations

import os

from .server import ensure_server


def task_runner(workers: int | None = None, scheduler: str | None = None,
                scheduler_file: str | None = None):
    """A DaskTaskRunner on an existing scheduler, or on a new LocalCluster of `workers` processes."""
    from prefect_dask import DaskTaskRunner

    if scheduler and scheduler_file:
        raise ValueError("give either scheduler or scheduler_file, not both")
    if scheduler_file:
        import json

        with open(scheduler_file) as f:
            scheduler = json.load(f)["address"]
    if scheduler:
        return DaskTaskRunner(address=scheduler)
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        cluster_kwargs={
            "n_workers": workers or os.cpu_count() or 1,
            "threads_per_worker": 1,  # one kernel per process: numba releases the GIL anyway
            "processes": True,
            "dashboard_address": ":0",
        },
    )


def run_sweep(spec: dict, store: str, *, workers: int | None = None, scheduler: str | None = None,
              scheduler_file: str | None = None, failed_only: bool = False,
              progress: bool = True) -> dict:
    """Run the sweep flow against one Prefect server (started here if none is configured)."""
    api_url = ensure_server()
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from .sweep import sweep_flow

    runner = task_runner(workers, scheduler, scheduler_file)
    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        return sweep_flow.with_options(task_runner=runner)(
            spec=spec, store=store, failed_only=failed_only, progress=progress)
