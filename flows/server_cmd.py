"""`tokensweep server start|env|stop`: the local Prefect server (flows/server.py)."""

from __future__ import annotations

import os
from typing import Optional

import typer

server_app = typer.Typer(help="The local Prefect server (UI at its URL without /api).")


@server_app.command("start")
def server_start(
    database: Optional[str] = typer.Option(
        None, help="the server's database: postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DB",
        show_default="$PREFECT_API_DATABASE_CONNECTION_URL, else SQLite in TOKENSWEEP_HOME"),
):
    """Start (or reuse) tokensweep's local Prefect server and print its API URL."""
    from .cli import _fail
    from .server import ServerError, local_server

    try:
        typer.echo(local_server(database))
    except ServerError as err:
        _fail(str(err))


@server_app.command("env")
def server_env():
    """Print `export PREFECT_API_URL=...` for tokensweep's server (started if none runs).

        $ eval "$(tokensweep server env)"     # then bare `prefect ...` commands use it
    """
    from .server import QUIET_ENV, ensure_server

    typer.echo(f"export PREFECT_API_URL={ensure_server()}")
    for key, value in QUIET_ENV.items():
        typer.echo(f"export {key}={os.environ.get(key, value)}")


@server_app.command("stop")
def server_stop():
    """Stop the local Prefect server that tokensweep started (in TOKENSWEEP_HOME), and the warm
    process that runs its commands (flows/warm_cli.py)."""
    from .server import stop_server
    from .warm_cli import stop_host

    stop_host()
    typer.echo("stopped" if stop_server() else "no server started by tokensweep is running")
