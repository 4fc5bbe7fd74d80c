"""What the `tokensweep` command groups share: the options they take, how a command fails, where
a sweep's logs go, and what a run on a store would compute.

Only typer and the standard library are imported here: `tokensweep --help` and a command's
own imports stay light; the pipeline is imported inside the functions that use it.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn, Optional

import typer

PROG = "tokensweep"  # the command's name in help and errors, however it was started
command_line: Optional[list[str]] = None  # the arguments `main` was given (the log's header)

# -- the options and arguments several commands take -------------------------------------------
# Defaults that are not plain values are shown with show_default: typer's help renders text
# like "[default: x]" inside a help string as rich markup, i.e. drops it.
StoreArg = typer.Argument(..., help="path or URL (s3://bucket/x.zarr) of a tokensweep zarr store",
                          show_default=False)
SpecArg = typer.Argument(..., help="YAML spec file, or the name of a catalog entry",
                         show_default=False)
StoreOpt = typer.Option(None, help="zarr store path, or URL (s3://bucket/x.zarr)",
                        show_default="the spec's `store`")
WorkersOpt = typer.Option(None, min=1, help="local Dask worker processes",
                          show_default="one per core")
ScaleOpt = typer.Option(None, help="small: the quick version (a minute or two on 2 cores); paper: the "
                        "paper's sizes (the spec's `scales` block)", show_default="small")
PartitionOpt = typer.Option(None, min=1, help="trajectories per partition",
                            show_default="the spec's, or the existing store's")
SchedulerOpt = typer.Option(None, help="address of an existing Dask scheduler (tcp://HOST:PORT)",
                            show_default="a new local cluster")
SchedulerFileOpt = typer.Option(None, help="scheduler file of an existing Dask cluster",
                                show_default="a new local cluster")
# A batch cluster (flows/jobqueue.py): options override the profile, which overrides jobqueue.yaml
ClusterOpt = typer.Option(None, help="where the workers run: local, slurm or pbs (batch jobs "
                          "through dask-jobqueue)", show_default="local, or the profile's")
ProfileOpt = typer.Option(None, help="batch-cluster settings named NAME in dask's config, "
                          "`tokensweep.clusters.NAME` (see docs/cluster.md)", show_default="none")
QueueOpt = typer.Option(None, help="batch queue (SLURM partition)",
                        show_default="the profile's, or the batch system's")
AccountOpt = typer.Option(None, help="account the jobs are charged to",
                          show_default="the profile's, or your default")
WalltimeOpt = typer.Option(None, help="time limit of each job, e.g. 04:00:00",
                           show_default="the profile's, or jobqueue.yaml's")
MemoryOpt = typer.Option(None, help="memory of each job, e.g. 8GB",
                         show_default="the profile's, or 2GiB per core")
JobsOpt = typer.Option(None, min=1, help="worker jobs (fewer if fewer partitions are left)",
                       show_default="the profile's, or 1")
CoresOpt = typer.Option(None, min=1, help="cores per job, one single-threaded worker each",
                        show_default="the profile's, or 1")
ProgressOpt = typer.Option(True, help="show a progress bar over partitions")
ReportOpt = typer.Option(True, help="write the report when the sweep ends (--no-report: the cube "
                                    "only; `tokensweep report STORE` writes it later)")
QuietOpt = typer.Option(False, "--quiet", "-q", help="print only errors")
VerboseOpt = typer.Option(False, "--verbose", "-v",
                          help="show Prefect's and Dask's logs here (instead of the progress bar) "
                               "rather than only in STORE.log")


# -- failing: one line on stderr, exit 2 for bad input -----------------------------------------

def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0]


def interrupted(err: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, or one pydantic-core wrapped because it struck inside a
    serializer function (it turns whatever such a function raises into its own error)."""
    return isinstance(err, KeyboardInterrupt) or (
        type(err).__name__ == "PydanticSerializationError" and "KeyboardInterrupt" in str(err))


def one_of_quiet_verbose(quiet: bool, verbose: bool) -> None:
    if quiet and verbose:
        fail("give either -q/--quiet or -v/--verbose, not both")


# -- stores --------------------------------------------------------------------------------------

def normalised_store(store: str) -> str:
    """A store argument as given on the command line: a file:// URL is its path."""
    from ...pipeline.store import location

    return location.normalised(store)


def store_target(store: str) -> Path | str:
    """A store argument as the pipeline takes it: a Path, or a URL kept as text."""
    from ...pipeline.prepare import store_target as target

    return target(store)


def refuse_if_locked(store: Path | str) -> None:
    """StoreError naming the owner of the store's lock (and whether it is stale); the flow run
    of a stale lock is set Crashed in Prefect first (it stays Running there otherwise)."""
    from ...pipeline.errors import StoreError
    from ...pipeline.store.lock import read_lock, store_lock
    from ..flow_lock import mark_crashed_if_stale

    if read_lock(store) is None:
        return
    try:
        with store_lock(store):  # raises StoreError naming the owner (and staleness)
            pass
    except StoreError:
        done = mark_crashed_if_stale(store)
        if done:
            typer.echo(done, err=True)
        raise


def done_count(store: Path | str) -> int:
    """Partitions of `store` done (0 where it does not exist yet)."""
    from ...pipeline.errors import StoreError
    from ...pipeline.store.cube import read_status
    from ...pipeline.store.layout import DONE

    try:
        return int((read_status(store) == DONE).sum())
    except StoreError:  # not created yet
        return 0


# -- a sweep's logs ------------------------------------------------------------------------------

def log_path(store: str | Path) -> Path:
    """STORE.log; for a remote store, NAME.log in the current folder (logs stay local)."""
    from ...pipeline.store import location

    if location.is_remote(store):
        return location.local_sibling(store, ".log")
    store = Path(store)
    return store.with_name(store.name + ".log")


@contextmanager
def logs_to(log: Path, verbose: bool):
    """Everything written to stderr during the block goes to `log` (unless verbose): Prefect's and
    Dask's logs from this process, and from the local workers, which inherit its stderr. The
    log's header names the command."""
    if verbose:
        yield
        return
    args = sys.argv[1:] if command_line is None else command_line
    from ..redact import redact  # a --database URL's password stays out of the log

    command = redact(" ".join([PROG, *args]))
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        f.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {command}\n".encode())
        f.flush()
        sys.stderr.flush()
        terminal = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(terminal, 2)
            os.close(terminal)


# -- what a run would compute ----------------------------------------------------------------------

def partitions_to_run(sweep, failed_only: bool = False) -> int:
    """How many partitions `run` computes on the sweep's store (`lifecycle.partitions_to_run`)."""
    from ...pipeline.store import lifecycle

    return lifecycle.partitions_to_run(sweep, sweep.store, failed_only)


def workers_phrase(count: int, gpus: int) -> str:
    """'2 local workers', or '1 local GPU worker' for a cuda run (`gpus`: the GPUs seen here)."""
    return f"{count} local {'GPU ' if gpus else ''}worker{'' if count == 1 else 's'}"


def local_problem(sweep) -> Optional[str]:
    """What this machine lacks to compute the sweep (`Model.local_problem`: a GPU), or None."""
    from ...pipeline.models import get_model

    return get_model(sweep.model).local_problem(sweep)
