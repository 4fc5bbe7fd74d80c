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
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from ..pipeline import location
from ..pipeline.errors import SpecError, StoreError
from ..pipeline.spec import load_sweep, read_spec
from ..pipeline.store import (DONE, FAILED, NEW_STORE_HINT, read_status, refuse_missing_outputs,
                              spec_differences, stored_sweep)
from .options import (AccountOpt, ClusterOpt, CoresOpt, JobsOpt, MemoryOpt, PartitionOpt,
                      ProfileOpt, ProgressOpt, QueueOpt, QuietOpt, ScaleOpt, SchedulerFileOpt,
                      SchedulerOpt, SpecArg, StoreArg, StoreOpt, VerboseOpt, WalltimeOpt, WorkersOpt)
from .cluster_cmd import cluster_app
from .fast_exit import exit_now
from .server_cmd import server_app

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Phase diagrams of token clustering in deep Transformers.")
app.add_typer(server_app, name="server")
app.add_typer(cluster_app, name="cluster")



def _fail(message: str, code: int = 2):
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        from ..pipeline.provenance import code_version

        typer.echo(f"tokensweep {code_version()}")
        raise typer.Exit()


@app.callback()
def _main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the installed version and exit"),
):
    """Phase diagrams of token clustering in deep Transformers."""


# -- validation: everything a run needs, checked before anything is computed or written -------

def _check_store_path(path: Path | str) -> None:
    """A store path a sweep can create or resume: not a file, in a folder one can write in; a
    store URL: a protocol fsspec knows, an endpoint that answers, credentials, the bucket."""
    if location.is_remote(path):
        location.check_reachable(path)
        return
    if path.exists() and not path.is_dir():
        raise StoreError(f"store {path} is a file, not a store folder: give --store a new path "
                         "or an existing tokensweep store")
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise StoreError(f"store {path}: {folder} is a file, not a folder: give --store a path "
                         "inside a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StoreError(f"store {path}: cannot write in {folder}: give --store a path in a "
                         "folder you can write in")


def resolve_run(spec_path: str, store: Optional[str], partition_traj: Optional[int],
                check_lock: bool = True, scale: Optional[str] = None):
    """Validate the spec against the command line and any existing store; write nothing."""
    sweep = load_sweep(spec_path, scale, store=store, partition_traj=partition_traj)
    path = _store(sweep.store)
    _check_store_path(path)
    if location.holds_anything(path):
        old = stored_sweep(path)
        raw = read_spec(spec_path, scale or "small")
        if partition_traj is None and "partition_traj" not in raw:
            # a store keeps the partitioning it was created with unless the user asks otherwise
            sweep = load_sweep(spec_path, scale, store=store, partition_traj=old.partition_traj)
        diff = spec_differences(old, sweep, growable=True)  # what remains would change stored numbers
        if diff:
            raise StoreError(f"{path} holds a different spec ({'; '.join(diff)}): {NEW_STORE_HINT}")
        if location.is_remote(path):  # no grow there: refused now, not in the flow
            from ..pipeline.grow import refuse_remote
            from ..pipeline.store import growth

            refuse_remote(path, growth(old, sweep, path))
        read_status(path)  # a damaged store is refused here, before any flow starts
        refuse_missing_outputs(sweep, path)
    if check_lock:
        _refuse_if_locked(path)
    return sweep


def _store(store: str) -> Path | str:
    """A store argument as the pipeline takes it: a Path, or a URL kept as text."""
    return store if location.is_remote(store) else Path(location.normalised(store))


def _refuse_if_locked(store: Path | str) -> None:
    from ..pipeline.lock import read_lock, store_lock

    if read_lock(store) is not None:
        try:
            with store_lock(store):  # raises StoreError naming the owner (and staleness)
                pass
        except StoreError:
            _report_crashed(store)
            raise


def _report_crashed(store: Path | str) -> None:
    """A stale lock's flow run is set Crashed in Prefect (it stays Running there otherwise)."""
    from .flow_lock import mark_crashed_if_stale

    done = mark_crashed_if_stale(store)
    if done:
        typer.echo(done, err=True)


def _scheduler(scheduler: Optional[str], scheduler_file: Optional[str],
               warm: bool = False) -> Optional[str]:
    """The scheduler asked for; else, if `warm`, the warm cluster's (`tokensweep cluster start`)."""
    from .run import ClusterError, resolve_scheduler
    from .warm_cluster import warm_scheduler

    try:
        return resolve_scheduler(scheduler, scheduler_file) or (warm_scheduler() if warm else None)
    except ClusterError as err:
        _fail(str(err))


def _batch(cluster, profile, workers, scheduler, **given):
    """The batch cluster asked for (None: local or existing), checked before anything runs."""
    from .jobqueue import JobqueueError, check_submit_command, resolve_options

    try:
        batch = resolve_options(cluster, profile, **given)
        if batch is not None and (workers is not None or scheduler is not None):
            _fail(f"--cluster {batch.kind} starts its own workers: leave out --workers, "
                  "--scheduler and --scheduler-file (use --jobs and --cores)")
        if batch is not None:  # the command line first, then this machine: can it submit?
            check_submit_command(batch)
    except JobqueueError as err:
        _fail(str(err))
    return batch


def _to_run(sweep, failed_only: bool = False) -> int:
    """How many partitions a run would compute: those not done (or only the failed ones)."""
    from ..pipeline.plan import Plan

    if not location.exists(f"{sweep.store.rstrip('/')}/zarr.json"):
        return len(Plan(sweep))
    flat = read_status(sweep.store)
    return int((flat == FAILED).sum() if failed_only else (flat != DONE).sum())


def _done(store: Path | str) -> int:
    try:
        return int((read_status(store) == DONE).sum())
    except StoreError:  # not created yet
        return 0


# -- running: a quiet terminal, logs beside the store ----------------------------------------

def log_path(store: str | Path) -> Path:
    """STORE.log; for a remote store, NAME.log in the current folder (logs stay local)."""
    if location.is_remote(store):
        return location.local_sibling(store, ".log")
    store = Path(store)
    return store.with_name(store.name + ".log")


@contextmanager
def _logs_to(log: Path, verbose: bool):
    """Everything written to stderr during the block goes to `log` (unless verbose): Prefect's and
    Dask's logs from this process, and from the local workers, which inherit its stderr."""
    if verbose:
        yield
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        f.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(sys.argv)}\n".encode())
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


def _kernels_cold() -> bool:
    """True when numba's cache for this kernel source is empty: the first run compiles (~30 s)."""
    from ..kernels.cache import use_versioned_cache_dir

    folder = Path(use_versioned_cache_dir())
    return not folder.is_dir() or not any(folder.iterdir())


def local_problem(sweep) -> Optional[str]:
    """What this machine lacks to compute the sweep (`Model.local_problem`: a GPU), or None."""
    from ..pipeline.models import get_model

    return get_model(sweep.model).local_problem(sweep)


def _execute(sweep, *, quiet: bool, verbose: bool, progress: bool, workers: Optional[int],
             scheduler: Optional[str], failed_only: bool = False, batch=None) -> None:
    from ..pipeline.plan import Plan
    from .jobqueue import JobqueueError, batch_cluster, fit_to_work
    from .run import local_workers, run_sweep, runs_in_process

    if scheduler is None and batch is None:  # local workers: they have what this machine has
        problem = local_problem(sweep)
        if problem:
            _fail(problem)

    store, total = _store(sweep.store), len(Plan(sweep))
    log, todo = log_path(store), _to_run(sweep, failed_only)
    details = "" if verbose else f" (details in {log})"
    batch = batch and fit_to_work(batch, todo)
    if not quiet:
        where = batch.describe() if batch else f"the cluster at {scheduler}" if scheduler else \
            f"{local_workers(workers, todo)} local workers" if not runs_in_process(todo) else \
            "this process (no cluster)"  # no idle workers; nor a cluster for one partition
        logs = "" if verbose else f" (logs: {log})"
        typer.echo(f"{sweep.name}: {todo} of {total} partitions to run into {store} on {where}{logs}")
        if scheduler is None and batch is None and _kernels_cold():
            typer.echo("compiling kernels (first run only): the first partitions take ~30 s more")
    try:
        with _logs_to(log, verbose), batch_cluster(batch, todo, sweep) as address:
            summary = run_sweep(sweep.model_dump(mode="json"), sweep.store, workers=workers,
                                scheduler=address or scheduler, failed_only=failed_only,
                                progress=progress and not quiet and not verbose)
    except (SpecError, StoreError, JobqueueError) as err:  # or a job the batch system refused
        _fail(str(err))
    except RuntimeError as err:  # partitions failed: the message lists them
        _fail(f"{err}{details}", code=1)
    except (KeyboardInterrupt, Exception) as err:
        if _interrupted(err):
            typer.echo(f"interrupted: {_done(store)} of {total} partitions done; "
                       "run the same command to resume", err=True)
            raise typer.Exit(130)
        _fail(f"the sweep stopped: {type(err).__name__}: {_first_line(err)}; {_done(store)} of "
              f"{total} partitions done{details}; run the same command to resume", code=1)
    if quiet:
        return
    typer.echo(f"computed {summary['computed']} of {summary['partitions']} partitions into {summary['store']}")
    report_paths = summary.get("report", {})
    for name in ("html", "report"):  # the page and the markdown; the figures lie beside them
        if name in report_paths:
            typer.echo(f"{name}: {report_paths[name]}")


def _one_of_quiet_verbose(quiet: bool, verbose: bool) -> None:
    if quiet and verbose:
        _fail("give either -q/--quiet or -v/--verbose, not both")


def _interrupted(err: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, or one pydantic-core wrapped because it struck inside a
    serializer function (it turns whatever such a function raises into its own error)."""
    return isinstance(err, KeyboardInterrupt) or (
        type(err).__name__ == "PydanticSerializationError" and "KeyboardInterrupt" in str(err))


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0]


@app.command()
def run(
    spec: str = SpecArg,
    store: Optional[str] = StoreOpt,
    scale: Optional[str] = ScaleOpt,
    workers: Optional[int] = WorkersOpt,
    partition_traj: Optional[int] = PartitionOpt,
    scheduler: Optional[str] = SchedulerOpt,
    scheduler_file: Optional[str] = SchedulerFileOpt,
    cluster: Optional[str] = ClusterOpt,
    cluster_profile: Optional[str] = ProfileOpt,
    queue: Optional[str] = QueueOpt,
    account: Optional[str] = AccountOpt,
    walltime: Optional[str] = WalltimeOpt,
    memory: Optional[str] = MemoryOpt,
    jobs: Optional[int] = JobsOpt,
    cores: Optional[int] = CoresOpt,
    progress: bool = ProgressOpt,
    quiet: bool = QuietOpt,
    verbose: bool = VerboseOpt,
):
    """Run a sweep (or resume it: only partitions not done are computed), then report."""
    _one_of_quiet_verbose(quiet, verbose)
    batch = _batch(cluster, cluster_profile, workers, scheduler or scheduler_file, queue=queue,
                   account=account, walltime=walltime, memory=memory, jobs=jobs, cores=cores)
    try:
        sweep = resolve_run(spec, store, partition_traj, scale=scale)
    except (SpecError, StoreError) as err:
        _fail(str(err))
    _execute(sweep, workers=workers, progress=progress, quiet=quiet, verbose=verbose, batch=batch,
             scheduler=_scheduler(scheduler, scheduler_file, warm=workers is None and batch is None))


@app.command()
def rerun(
    store: str = StoreArg,
    failed_only: bool = typer.Option(False, "--failed-only", help="only partitions marked failed"),
    workers: Optional[int] = WorkersOpt,
    scheduler: Optional[str] = SchedulerOpt,
    scheduler_file: Optional[str] = SchedulerFileOpt,
    cluster: Optional[str] = ClusterOpt,
    cluster_profile: Optional[str] = ProfileOpt,
    queue: Optional[str] = QueueOpt,
    account: Optional[str] = AccountOpt,
    walltime: Optional[str] = WalltimeOpt,
    memory: Optional[str] = MemoryOpt,
    jobs: Optional[int] = JobsOpt,
    cores: Optional[int] = CoresOpt,
    progress: bool = ProgressOpt,
    quiet: bool = QuietOpt,
    verbose: bool = VerboseOpt,
):
    """Redo the partitions of STORE that are not done (or only the failed ones), with its own spec."""
    store = location.normalised(store)  # a file:// URL is its path
    _one_of_quiet_verbose(quiet, verbose)
    batch = _batch(cluster, cluster_profile, workers, scheduler or scheduler_file, queue=queue,
                   account=account, walltime=walltime, memory=memory, jobs=jobs, cores=cores)
    try:
        sweep = stored_sweep(store).model_copy(update={"store": store})
        read_status(store)
        _refuse_if_locked(_store(store))
    except StoreError as err:
        _fail(str(err))
    _execute(sweep, workers=workers, failed_only=failed_only, progress=progress, quiet=quiet,
             verbose=verbose, batch=batch,
             scheduler=_scheduler(scheduler, scheduler_file, warm=workers is None and batch is None))


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
    from .serve import serve_sweeps

    address = _scheduler(scheduler, scheduler_file)
    serve_sweeps(name, workers=workers, scheduler=address, limit=limit)


# Commands whose bodies are modules of their own (they import the options above from here)
from .boundary import boundary as _boundary  # noqa: E402
from .looking import catalog as _catalog, plan as _plan  # noqa: E402
from .stores import report as _report, status as _status, unlock as _unlock  # noqa: E402

app.command(name="catalog")(_catalog)
app.command(name="plan")(_plan)
app.command(name="unlock")(_unlock)
app.command(name="status")(_status)
app.command(name="report")(_report)
app.command()(_boundary)


def main():
    """The `tokensweep` entry point: every error is one line on stderr, never a traceback."""
    try:
        code = app(standalone_mode=False)
    except typer.Abort:  # end of input at a prompt
        code = 1
    except Exception as err:
        if hasattr(err, "format_message") and hasattr(err, "exit_code"):  # click's (typer's) own
            # `tokensweep` alone has shown its help; else an unknown command or option, a bad value
            if type(err).__name__ != "NoArgsIsHelpError":
                ctx = getattr(err, "ctx", None)
                command = ctx.command_path if ctx else "tokensweep"
                typer.echo(f"error: {err.format_message().rstrip('.')}: see `{command} --help`",
                           err=True)
            code = err.exit_code
        elif os.environ.get("TOKENSWEEP_DEBUG"):
            raise
        else:  # a bug: one line here, the traceback with TOKENSWEEP_DEBUG=1
            typer.echo(f"error: unexpected {type(err).__name__}: {_first_line(err)} (a bug in "
                       "tokensweep: please report it; TOKENSWEEP_DEBUG=1 shows the traceback)",
                       err=True)
            code = 1
    exit_now(code or 0)  # no interpreter teardown: up to a second after a sweep


if __name__ == "__main__":
    sys.exit(main())
