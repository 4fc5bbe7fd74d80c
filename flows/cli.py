"""The ``tokensweep`` command line.

    $ tokensweep run catalog/quickstart.yaml      # local Dask cluster + local Prefect server
    $ tokensweep status results/quickstart.zarr   # partitions done / pending / failed
    $ tokensweep report results/quickstart.zarr   # phase.png + report.md
    $ tokensweep models                           # the models a spec can name

Bad input (a spec or store that cannot be used) exits with code 2 and one message
naming the field and the fix, before anything is computed or written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
import yaml

from ..pipeline.spec import SpecError, load_sweep, resolve_spec_path
from ..pipeline.store import DONE, FAILED, PENDING, StoreError, spec_differences, stored_sweep, \
    NEW_STORE_HINT

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Phase diagrams of token clustering in deep Transformers.")
server_app = typer.Typer(help="The local Prefect server (UI at its URL without /api).")
app.add_typer(server_app, name="server")

StoreArg = typer.Argument(..., help="path of a tokensweep zarr store")


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
    _refuse_if_locked(path)
    return sweep


def _refuse_if_locked(store: Path) -> None:
    from ..pipeline.lock import read_lock, store_lock

    if read_lock(store) is not None:
        with store_lock(store):  # raises StoreError naming the owner (and staleness)
            pass


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
    workers: Optional[int] = typer.Option(None, min=1, help="local Dask worker processes [default: cores]"),
    partition_traj: Optional[int] = typer.Option(None, min=1, help="trajectories per partition"),
    scheduler: Optional[str] = typer.Option(None, help="address of an existing Dask scheduler"),
    scheduler_file: Optional[str] = typer.Option(None, help="scheduler file of an existing Dask cluster"),
    progress: bool = typer.Option(True, help="show a progress bar over partitions"),
):
    """Run a sweep (or resume it: only partitions not done are computed), then report."""
    try:
        sweep = resolve_run(spec, store, partition_traj)
    except (SpecError, StoreError) as err:
        _fail(str(err))
    _execute(sweep, workers=workers, scheduler=scheduler, scheduler_file=scheduler_file,
             progress=progress)


@app.command()
def rerun(
    store: str = StoreArg,
    failed_only: bool = typer.Option(False, "--failed-only", help="only partitions marked failed"),
    workers: Optional[int] = typer.Option(None, min=1, help="local Dask worker processes [default: cores]"),
    scheduler: Optional[str] = typer.Option(None, help="address of an existing Dask scheduler"),
    progress: bool = typer.Option(True, help="show a progress bar over partitions"),
):
    """Redo the partitions of STORE that are not done (or only the failed ones), with its own spec."""
    try:
        sweep = stored_sweep(store).model_copy(update={"store": store})
        _refuse_if_locked(Path(store))
    except StoreError as err:
        _fail(str(err))
    _execute(sweep, workers=workers, scheduler=scheduler, failed_only=failed_only, progress=progress)


@app.command()
def unlock(store: str = StoreArg):
    """Break the lock of STORE left by a sweep that died (check that none is running first)."""
    from ..pipeline.lock import break_lock

    held = break_lock(store)
    typer.echo(f"broke the lock held by {held}" if held else f"{store} was not locked")


@app.command()
def status(store: str = StoreArg):
    """Partitions done / pending / failed (failed ones listed by cell and trajectory block)."""
    from ..pipeline.plan import Plan
    from ..pipeline.store import read_status

    try:
        sweep = stored_sweep(store)
        flat = read_status(store)
    except StoreError as err:
        _fail(str(err))
    plan = Plan(sweep)
    counts = {name: int((flat == code).sum()) for name, code in
              (("done", DONE), ("pending", PENDING), ("failed", FAILED))}
    typer.echo(f"{sweep.name}: {len(plan)} partitions: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    for index in (flat == FAILED).nonzero()[0]:
        typer.echo(f"  failed: partition {index} ({plan.label(plan[int(index)])})")


@app.command()
def report(
    store: str = StoreArg,
    out: Optional[str] = typer.Option(None, help="output folder [default: STORE with suffix .report]"),
):
    """Write phase.png and report.md (empirical probabilities against the closed forms)."""
    from ..pipeline.report import write_report
    from ..pipeline.store import open_cube, read_status

    try:
        flat = read_status(store) if Path(store).exists() else None
        with open_cube(store) as ds:
            if flat is not None and (flat != DONE).any():
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
    from ..pipeline.models import REGISTRY

    for entry in REGISTRY.values():
        typer.echo(f"{entry.name:24s} {entry.summary}")


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
