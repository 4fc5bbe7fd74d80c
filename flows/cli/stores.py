"""`tokensweep unlock`, `status` and `report`: the commands that read (or unlock) a store.

None of them computes a partition; each refuses a store it cannot read in one line (exit 2).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from .common import StoreArg, fail, normalised_store


def unlock(store: str = StoreArg):
    """Break the lock of STORE left by a sweep that died (check that none is running first)."""
    from ...pipeline.errors import StoreError
    from ...pipeline.store import location
    from ...pipeline.store.lock import break_lock, is_running_here, lock_path, owner_text
    from ..flow_lock import mark_crashed

    store = normalised_store(store)
    try:
        if location.is_remote(store):
            location.check_reachable(store)
        found = location.exists(store) or location.exists(lock_path(store))
    except StoreError as err:
        fail(str(err))
    if not found:
        fail(f"no store at {store} and no lock beside it: check the path")
    held = break_lock(store)
    typer.echo(f"broke the lock held by {owner_text(held)}" if held is not None
               else f"{store} was not locked")
    if held and is_running_here(held):  # broken by hand: its flow run is not Crashed
        typer.echo(f"warning: pid {held.get('pid')} is still running; stop it before another "
                   "sweep writes this store", err=True)
        return
    crashed = mark_crashed(held) if held else None  # its flow run died with it
    if crashed:
        typer.echo(crashed)


def status(store: str = StoreArg):
    """Partitions done / pending / failed; each failed one with its cell, block and error."""
    import numpy as np

    from ...pipeline.errors import StoreError
    from ...pipeline.plan import Plan
    from ...pipeline.store.cube import read_partition_table, stored_sweep
    from ...pipeline.store.failures import read_error
    from ...pipeline.store.layout import DONE, FAILED, PENDING
    from ...pipeline.store.lock import describe_lock

    store = normalised_store(store)
    try:
        sweep = stored_sweep(store)
        flat = read_partition_table(store, "status")
        started = read_partition_table(store, "started")
    except StoreError as err:
        fail(str(err))
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


def report(
    store: Optional[str] = typer.Argument(None, help="path of a tokensweep zarr store, or the name of "
                                          "a catalog entry (its default store)", show_default=False),
    out: Optional[str] = typer.Option(None, help="output folder", show_default="STORE.report"),
    index: Optional[str] = typer.Option(None, help="write DIR/index.html linking the report of every "
                                        "store under DIR (writing those missing or stale)",
                                        metavar="DIR", show_default="none: report STORE"),
    beside: Optional[str] = typer.Option(None, help="another store (or catalog name) drawn beside STORE: "
                                         "the cluster counts over t of both on the cells both hold "
                                         "([F26] Fig. 9: the stochastic and the deterministic dynamics)",
                                         metavar="OTHER", show_default="none"),
):
    """Write report.html (self-contained), report.md and the figures; --index DIR: every store's."""
    if (store is None) == (index is None):  # before the report's imports (matplotlib, scipy: ~2 s)
        fail("report: give either STORE (a store or a catalog name) or --index DIR, not both or neither")
    if beside is not None and index is not None:
        fail("report: --beside draws one other store beside STORE: give STORE, not --index")
    from ...pipeline.errors import SpecError, StoreError
    from ...pipeline.report.index import verdict_lines, write_index
    from ...pipeline.store import location
    from ...pipeline.store.cube import open_cube, read_status, stored_sweep
    from ...pipeline.store.layout import DONE
    from ...pipeline.store.reading import store_path

    try:
        if index is not None:
            typer.echo(f"index: {write_index(index)}")
            for line in verdict_lines(index):  # each store's claims: holds, fails, not met, not checked
                typer.echo(line)
            return
        store = location.normalised(store_path(location.normalised(store)))  # file:// URL: its path
        stored_sweep(store)
        flat = read_status(store)
        other = None if beside is None else location.normalised(store_path(location.normalised(beside)))
        if other is not None:
            stored_sweep(other)
        from ...pipeline.report import write_report  # matplotlib, scipy: once the store is read

        with open_cube(store) as ds, (open_cube(other) if other else contextlib.nullcontext()) as other_ds:
            if (flat != DONE).any():
                typer.echo(f"warning: {(flat != DONE).sum()} partitions not done; "
                           "the report covers done partitions' cells only", err=True)
            paths = write_report(ds, Path(out) if out else location.report_dir(store), beside=other_ds)
    except (StoreError, SpecError) as err:
        fail(str(err))
    for name, path in paths.items():
        typer.echo(f"{name}: {path}")
