"""The services a user starts and stops explicitly: `tokensweep server start|env|stop` (the local
Prefect server, flows/server.py), `tokensweep cluster start|status|stop` (a local Dask cluster
kept between runs, flows/cluster_service.py) and `tokensweep serve` (the deployment that runs
sweeps launched from the Prefect UI, flows/serve.py). Nothing here starts a process the user
did not ask for.
"""

from __future__ import annotations

import os
from typing import Optional

import typer

from .common import SchedulerFileOpt, SchedulerOpt, WorkersOpt, fail

server_app = typer.Typer(help="The local Prefect server (UI at its URL without /api).")
cluster_app = typer.Typer(help="A local Dask cluster kept between runs (see docs/cluster.md).")


@server_app.command("start")
def server_start(
    database: Optional[str] = typer.Option(
        None, help="the server's database: postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DB",
        show_default="$PREFECT_API_DATABASE_CONNECTION_URL, else SQLite in TOKENSWEEP_HOME"),
):
    """Start (or reuse) tokensweep's local Prefect server and print its API URL."""
    from ..server import ServerError, local_server

    try:
        typer.echo(local_server(database))
    except ServerError as err:
        fail(str(err))


@server_app.command("env")
def server_env():
    """Print `export PREFECT_API_URL=...` for tokensweep's server (started if none runs).

        $ eval "$(tokensweep server env)"     # then bare `prefect ...` commands use it
    """
    from ..server import QUIET_ENV, ensure_server

    typer.echo(f"export PREFECT_API_URL={ensure_server()}")
    for key, value in QUIET_ENV.items():
        typer.echo(f"export {key}={os.environ.get(key, value)}")


@server_app.command("stop")
def server_stop():
    """Stop the local Prefect server that tokensweep started (in TOKENSWEEP_HOME)."""
    from ..server import stop_server

    typer.echo("stopped" if stop_server() else "no server started by tokensweep is running")


@cluster_app.command("start")
def cluster_start(workers: Optional[int] = typer.Option(None, min=1, help="worker processes",
                                                         show_default="one per core")):
    """Start (or keep) a local scheduler and single-threaded workers; print its address.
    `tokensweep run` uses it while it runs, unless given --workers or another cluster."""
    from ..cluster_service import start_cluster
    from ..run import ClusterError

    try:
        typer.echo(start_cluster(workers))
    except ClusterError as err:
        fail(str(err), code=1)


@cluster_app.command("status")
def cluster_status():
    """Print the local cluster's address, or say that none is usable."""
    from ..cluster_service import running_scheduler

    address = running_scheduler()
    typer.echo(address or "no local cluster started (or one started from other code): "
               "`tokensweep cluster start`")


@cluster_app.command("stop")
def cluster_stop():
    """Stop the local cluster's scheduler and workers."""
    from ..cluster_service import stop_cluster

    typer.echo("stopped" if stop_cluster() else "no local cluster is running")


def serve(
    name: str = typer.Option("tokensweep", help="deployment name (the flow is `sweep`)"),
    workers: Optional[int] = WorkersOpt,
    scheduler: Optional[str] = SchedulerOpt,
    scheduler_file: Optional[str] = SchedulerFileOpt,
    limit: Optional[int] = typer.Option(None, min=1, help="most flow runs at once",
                                        show_default="no limit"),
):
    """Register the `sweep/NAME` deployment and run sweeps launched (or retried) from the UI.

        $ tokensweep serve --scheduler-file ~/sched.json
        $ eval "$(tokensweep server env)"    # the bare `prefect` command then uses the same server
        $ prefect deployment run sweep/tokensweep --params '{"store": "results/q.zarr", "spec": {...}}'

    Runs until interrupted; each flow run uses the cluster chosen here (a new local
    cluster per run by default).
    """
    from ..serve import serve_sweeps
    from .run import scheduler_asked

    address = scheduler_asked(scheduler, scheduler_file)
    serve_sweeps(name, workers=workers, scheduler=address, limit=limit)
