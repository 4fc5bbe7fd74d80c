"""`tokensweep serve`: the sweep flow as a Prefect deployment, launched from the UI.

``flow.serve`` registers the deployment ``sweep/tokensweep`` (parameters: ``spec`` as a
dict, ``store``, ``failed_only``) and then polls the Prefect server for runs of it; each
run executes in a subprocess of this one, on the cluster chosen here. A failed run's
Retry in the UI (state -> Scheduled "AwaitingRetry") is picked up the same way, and the
tasks skip partitions the store already marks done, so only those not done are computed.
"""

from __future__ import annotations

DEPLOYMENT = "tokensweep"


def serve_sweeps(name: str = DEPLOYMENT, *, workers: int | None = None,
                 scheduler: str | None = None, scheduler_file: str | None = None,
                 limit: int | None = None) -> None:
    """Serve the sweep deployment until interrupted (Ctrl-C), on tokensweep's Prefect server."""
    from .run import prepare_environment, resolve_scheduler, task_runner
    from .server import prefect_api

    scheduler = resolve_scheduler(scheduler, scheduler_file)
    api_url = prepare_environment(scheduler)
    from .sweep import sweep_flow

    served = sweep_flow.with_options(task_runner=task_runner(workers, scheduler))
    with prefect_api(api_url):  # else a temporary server: Prefect read its settings at import
        served.serve(
            name=name,
            parameters={"failed_only": False, "progress": False},
            description="Run (or resume) a tokensweep sweep: `spec` is the YAML spec as a "
                        "mapping, `store` the zarr store path as seen by this server process.",
            tags=["tokensweep"],
            limit=limit,
        )
