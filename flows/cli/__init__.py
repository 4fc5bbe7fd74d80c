"""The ``tokensweep`` command line.

    $ tokensweep catalog                          # the ready-to-run specs, with their cost
    $ tokensweep plan quickstart                  # partitions, store size, time: computes nothing
    $ tokensweep run catalog/quickstart.yaml      # local Dask cluster + local Prefect server
    $ tokensweep status results/quickstart.zarr   # partitions done / pending / failed
    $ tokensweep report results/quickstart.zarr   # report.html (+ report.md, PNGs)
    $ tokensweep models                           # the models a spec can name
    $ tokensweep serve --scheduler-file sched.json  # launch and retry sweeps from the UI

Bad input (a spec, a store or an option that cannot be used) exits with code 2 and one line
naming the field and the fix, before anything is computed or written. `run` keeps the
terminal quiet: one line saying what it will do, a progress bar, the results; Prefect's and
Dask's logs go to STORE.log (to the terminal with -v). Ctrl-C exits with code 130 and one
line saying how far the sweep got; running the same command resumes it.

One module per command group, each importing what it shares from `common` (never from here):
`run` (run, rerun), `look` (catalog, plan, models), `stores` (status, report, unlock),
`boundary` (the boundary search), `services` (server, cluster, serve). Their modules import
only typer at the top, the pipeline inside each command, so `tokensweep --help` stays fast.
`main(argv)` returns the exit code (tests call it in process); the console script
(`console`) then ends the process without the interpreter's teardown (`fast_exit.py`).
"""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from . import common
from .boundary import boundary
from .look import catalog, models, plan
from .run import rerun, run
from .services import cluster_app, serve, server_app
from .stores import report, status, unlock

__all__ = ["app", "main", "console"]

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Phase diagrams of token clustering in deep Transformers.")


def _version(value: bool) -> None:
    if value:
        from ...pipeline.store.provenance import code_version

        typer.echo(f"{common.PROG} {code_version()}")
        raise typer.Exit()


@app.callback()
def _main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the installed version and exit"),
):
    """Phase diagrams of token clustering in deep Transformers."""


for command in (run, rerun, plan, catalog, models, status, report, unlock, boundary, serve):
    app.command()(command)
app.add_typer(server_app, name="server")
app.add_typer(cluster_app, name="cluster")


def main(argv: Optional[list[str]] = None) -> int:
    """Run the command `argv` (default: this process's arguments); return its exit code. Every
    error is one line on stderr, never a traceback (TOKENSWEEP_DEBUG=1 shows a bug's)."""
    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    common.command_line = args
    try:
        code = app(args=args, prog_name=common.PROG, standalone_mode=False)
    except typer.Abort:  # end of input at a prompt
        code = 1
    except typer.Exit as done:  # raised outside a command (click turns those into return values)
        code = done.exit_code
    except Exception as err:
        if hasattr(err, "format_message") and hasattr(err, "exit_code"):  # click's (typer's) own
            # `tokensweep` alone has shown its help; else an unknown command or option, a bad value
            if type(err).__name__ != "NoArgsIsHelpError":
                ctx = getattr(err, "ctx", None)
                command = ctx.command_path if ctx else common.PROG
                typer.echo(f"error: {err.format_message().rstrip('.')}: see `{command} --help`",
                           err=True)
            code = err.exit_code
        elif os.environ.get("TOKENSWEEP_DEBUG"):
            raise
        else:  # a bug: one line here, the traceback with TOKENSWEEP_DEBUG=1
            typer.echo(f"error: unexpected {type(err).__name__}: {common.first_line(err)} (a bug "
                       "in tokensweep: please report it; TOKENSWEEP_DEBUG=1 shows the traceback)",
                       err=True)
            code = 1
    finally:
        common.command_line = None
    return code if isinstance(code, int) else 0


def console() -> None:
    """The `tokensweep` console script: `main`, then the process ends with its code at once,
    without the interpreter's teardown (up to a second after a sweep)."""
    from ..fast_exit import exit_now

    exit_now(main())
