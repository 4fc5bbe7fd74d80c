"""The ``tokensweep`` command line.

    $ tokensweep run catalog/quickstart.yaml      # local Dask cluster + local Prefect server
    $ tokensweep status results/quickstart.zarr   # partitions done / pending / failed
    $ tokensweep report results/quickstart.zarr   # phase.png + report.md
    $ tokensweep models                           # the models a spec can name
    $ tokensweep serve --scheduler-file sched.json  # launch and retry sweeps from the UI

Bad input (a spec or store that cannot be used) exits with code 2 and one message
naming the field and the fix, before anything is computed or written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import numpy as np
import typer
import yaml

from ..pipeline.spec import SpecError, load_sweep, resolve_spec_path
from ..pipeline.store import DONE, FAILED, PENDING, StoreError, spec_differences, stored_sweep, \
    NEW_STORE_HINT, read_status

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Phase diagrams of token clustering in deep Transformers.")
server_app = typer.Typer(help="The local Prefect server (UI at its URL without /api).")
app.add_typer(server_app, name="server")

StoreArg = typer.Argument(..., help="path of a tokensweep zarr store")
WorkersOpt = typer.Option(None, min=1, help="local Dask worker processes [default: cores]")
SchedulerOpt = typer.Option(None, help="address of an existing Dask scheduler (tcp://HOST:PORT)")
SchedulerFileOpt = typer.Option(None, help="scheduler file of an existing Dask cluster")


def _fail(message: str, code: int = 2):
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def resolve_run(spec_path: str, store: Optional[str], partition_traj: Optional[int]):
    """Validate the spec against the command line and any existing store; write nothing."""
    sweep = load_sweep(spec_path, store=store, partition_traj=partition_traj)
    path = Path(sweep.store)
    if path.exists() and any(path.iterdir()):
        old = stored_sweep(path)
        raw = yaml.safe_load(resolve_spec_path(spec_path).read_text())
        if partition_traj is None and "partition_traj" not in raw:
            # a store keeps the partitioning it was created with unless the user asks otherwise
            sweep = load_sweep(spec_path, store=store, partition_traj=old.partition_traj)
        diff = spec_differences(old, sweep)
        if diff:
            raise StoreError(f"{path} holds a different spec ({'; '.join(diff)}): {NEW_STORE_HINT}")
        read_status(path)  # a damaged store is refused here, before any flow starts
    _refuse_if_locked(path)
    return sweep


def _refuse_if_locked(store: Path) -> None:
    from ..pipeline.lock import read_lock, store_lock

    if read_lock(store) is not None:
        with store_lock(store):  # raises StoreError naming the owner (and staleness)
            pass


def _scheduler(scheduler: Optional[str], scheduler_file: Optional[str]) -> Optional[str]:
    from .run import ClusterError, resolve_scheduler

    try:
        return resolve_scheduler(scheduler, scheduler_file)
    except ClusterError as err:
        _fail(str(err))


def _execute(sweep, **options) -> None:
    from .run import run_sweep

    try:
        summary = run_sweep(sweep.model_dump(mode="json"), sweep.store, **options)
    except (SpecError, StoreError) as err:
        _fail(str(err))
    except RuntimeError as err:
        _fail(str(err), code=1)
    typer.echo(f"computed {summary['computed']} of {summary['partitions']} partitions into {summary['store']}")
    for name, path in summary.get("report", {}).items():
        typer.echo(f"{name}: {path}")


@app.command()
def run(
    spec: str = typer.Argument(..., help="YAML spec file, or the name of a catalog entry"),
    store: Optional[str] = typer.Option(None, help="zarr store path (overrides the spec's `store`)"),
    workers: Optional[int] = WorkersOpt,
    partition_traj: Optional[int] = typer.Option(None, min=1, help="trajectories per partition"),
    scheduler: Optional[str] = SchedulerOpt,
    scheduler_file: Optional[str] = SchedulerFileOpt,
    progress: bool = typer.Option(True, help="show a progress bar over partitions"),
):
    """Run a sweep (or resume it: only partitions not done are computed), then report."""
    try:
        sweep = resolve_run(spec, store, partition_traj)
    except (SpecError, StoreError) as err:
        _fail(str(err))
    _execute(sweep, workers=workers, scheduler=_scheduler(scheduler, scheduler_file),
             progress=progress)


@app.command()
def rerun(
    store: str = StoreArg,
    failed_only: bool = typer.Option(False, "--failed-only", help="only partitions marked failed"),
    workers: Optional[int] = WorkersOpt,
    scheduler: Optional[str] = SchedulerOpt,
    scheduler_file: Optional[str] = SchedulerFileOpt,
    progress: bool = typer.Option(True, help="show a progress bar over partitions"),
):
    """Redo the partitions of STORE that are not done (or only the failed ones), with its own spec."""
    try:
        sweep = stored_sweep(store).model_copy(update={"store": store})
        read_status(store)
        _refuse_if_locked(Path(store))
    except StoreError as err:
        _fail(str(err))
    _execute(sweep, workers=workers, scheduler=_scheduler(scheduler, scheduler_file),
             failed_only=failed_only, progress=progress)


@app.command()
def unlock(store: str = StoreArg):
    """Break the lock of STORE left by a sweep that died (check that none is running first)."""
    from ..pipeline.lock import break_lock, lock_path, owner_text

    if not Path(store).exists() and not lock_path(store).exists():
        _fail(f"no store at {store} and no lock beside it: check the path")
    held = break_lock(store)
    typer.echo(f"broke the lock held by {owner_text(held)}" if held is not None
               else f"{store} was not locked")


@app.command()
def status(store: str = StoreArg):
    """Partitions done / pending / failed; each failed one with its cell, block and error."""
    from ..pipeline.lock import describe_lock
    from ..pipeline.plan import Plan
    from ..pipeline.store import read_error, read_partition_table

    try:
        sweep = stored_sweep(store)
        flat = read_partition_table(store, "status")
        started = read_partition_table(store, "started")
    except StoreError as err:
        _fail(str(err))
    plan = Plan(sweep)
    counts = {name: int((flat == code).sum()) for name, code in
              (("done", DONE), ("pending", PENDING), ("failed", FAILED))}
    typer.echo(f"{sweep.name}: {len(plan)} partitions: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    lock = describe_lock(store)
    if lock:
        typer.echo(f"  locked by {lock}")
    unfinished = int(((flat == PENDING) & ~np.isnan(started)).sum())
    if unfinished:
        typer.echo(f"  {unfinished} pending partition(s) started but not finished "
                   "(running now, or killed: a rerun redoes them)")
    for index in (flat == FAILED).nonzero()[0]:
        index = int(index)
        record = read_error(store, index) or {}
        error = record.get("error", "error not recorded").splitlines()[-1]
        where = f" on {record['host']}" if record.get("host") else ""
        typer.echo(f"  failed: partition {index} ({plan.label(plan[index])}){where}: {error}")


@app.command()
def report(
    store: str = StoreArg,
    out: Optional[str] = typer.Option(None, help="output folder [default: STORE with suffix .report]"),
):
    """Write phase.png and report.md (empirical probabilities against the closed forms)."""
    from ..pipeline.report import write_report
    from ..pipeline.store import open_cube

    try:
        stored_sweep(store)
        flat = read_status(store)
        with open_cube(store) as ds:
            if (flat != DONE).any():
                typer.echo(f"warning: {(flat != DONE).sum()} partitions not done; "
                           "the report covers done partitions' cells only", err=True)
            paths = write_report(ds, Path(out) if out else Path(store).with_suffix(".report"))
    except StoreError as err:
        _fail(str(err))
    for name, path in paths.items():
        typer.echo(f"{name}: {path}")


@app.command()
def models():
    """List the models a spec can name."""
    from ..pipeline.models import registry

    for model in registry().values():
        typer.echo(f"{model.name:24s} {model.summary}")


@app.command()
def serve(
    name: str = typer.Option("tokensweep", help="deployment name (the flow is `sweep`)"),
    workers: Optional[int] = WorkersOpt,
    scheduler: Optional[str] = SchedulerOpt,
    scheduler_file: Optional[str] = SchedulerFileOpt,
    limit: Optional[int] = typer.Option(None, min=1, help="most flow runs at once [default: no limit]"),
):
    """Register the `sweep/NAME` deployment and run sweeps launched (or retried) from the UI.

        $ tokensweep serve --scheduler-file ~/sched.json
        $ prefect deployment run sweep/tokensweep -p store=results/q.zarr --params '{"spec": {...}}'

    Runs until interrupted; each flow run uses the cluster chosen here (a new local
    cluster per run by default).
    """
    from .serve import serve_sweeps

    address = _scheduler(scheduler, scheduler_file)
    serve_sweeps(name, workers=workers, scheduler=address, limit=limit)


@server_app.command("start")
def server_start():
    """Start (or reuse) the local Prefect server and print its API URL."""
    from .server import ensure_server

    typer.echo(ensure_server())


@server_app.command("stop")
def server_stop():
    """Stop the local Prefect server that tokensweep started."""
    from .server import stop_server

    typer.echo("stopped" if stop_server() else "no server started by tokensweep is running")


def main():
    app()


if __name__ == "__main__":
    sys.exit(main())
