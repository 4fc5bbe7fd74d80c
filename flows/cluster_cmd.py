"""`tokensweep cluster start|stop|status`: the warm local Dask cluster (flows/warm_cluster.py)."""

from __future__ import annotations

from typing import Optional

import typer

cluster_app = typer.Typer(help="A local Dask cluster kept warm between runs (see docs/cluster.md).")


@cluster_app.command("start")
def cluster_start(workers: Optional[int] = typer.Option(None, min=1, help="worker processes",
                                                         show_default="one per core")):
    """Start (or keep) a local scheduler and single-threaded workers; print its address.
    `tokensweep run` uses it while it runs, unless given --workers or another cluster."""
    from .run import ClusterError
    from .warm_cluster import start_cluster

    try:
        typer.echo(start_cluster(workers))
    except ClusterError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1)


@cluster_app.command("status")
def cluster_status():
    """Print the warm cluster's address, or say that none is usable."""
    from .warm_cluster import warm_scheduler

    address = warm_scheduler()
    typer.echo(address or "no warm cluster (or one started from other code): `tokensweep cluster start`")


@cluster_app.command("stop")
def cluster_stop():
    """Stop the warm cluster's scheduler and workers."""
    from .warm_cluster import stop_cluster

    typer.echo("stopped" if stop_cluster() else "no warm cluster is running")
