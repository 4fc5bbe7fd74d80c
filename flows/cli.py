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

import math
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import numpy as np
import typer

from ..pipeline import location
from ..pipeline.scales import scales_of
from ..pipeline.spec import CATALOG, SpecError, estimated_store_bytes, format_bytes, load_sweep, read_spec
from ..pipeline.store import DONE, FAILED, PENDING, StoreError, spec_differences, stored_sweep, \
    NEW_STORE_HINT, read_status
from .cluster_cmd import cluster_app
from .fast_exit import exit_now

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Phase diagrams of token clustering in deep Transformers.")
server_app = typer.Typer(help="The local Prefect server (UI at its URL without /api).")
app.add_typer(server_app, name="server")
app.add_typer(cluster_app, name="cluster")

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
QuietOpt = typer.Option(False, "--quiet", "-q", help="print only errors")
VerboseOpt = typer.Option(False, "--verbose", "-v",
                          help="show Prefect's and Dask's logs here (instead of the progress bar) "
                               "rather than only in STORE.log")


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
        if batch is not None:
            check_submit_command(batch)
    except JobqueueError as err:
        _fail(str(err))
    if batch is not None and (workers is not None or scheduler is not None):
        _fail(f"--cluster {batch.kind} starts its own workers: leave out --workers, --scheduler "
              "and --scheduler-file (use --jobs and --cores)")
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


def _execute(sweep, *, quiet: bool, verbose: bool, progress: bool, workers: Optional[int],
             scheduler: Optional[str], failed_only: bool = False, batch=None) -> None:
    from ..pipeline.plan import Plan
    from .jobqueue import JobqueueError, batch_cluster, fit_to_work

    store, total = _store(sweep.store), len(Plan(sweep))
    log, todo = log_path(store), _to_run(sweep, failed_only)
    details = "" if verbose else f" (details in {log})"
    batch = batch and fit_to_work(batch, todo)
    if not quiet:
        where = batch.describe() if batch else f"the cluster at {scheduler}" if scheduler else \
            f"{min(workers or os.cpu_count() or 1, todo)} local workers" if todo > 1 else \
            "this process (no cluster)"  # no idle workers; nor a cluster for one partition
        logs = "" if verbose else f" (logs: {log})"
        typer.echo(f"{sweep.name}: {todo} of {total} partitions to run into {store} on {where}{logs}")
        if scheduler is None and batch is None and _kernels_cold():
            typer.echo("compiling kernels (first run only): the first partitions take ~30 s more")
    try:
        from .run import run_sweep

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


# -- looking before running: catalog and plan ---------------------------------------------------

def _catalog_claims() -> dict[str, str]:
    """`name.yaml` -> its "paper, figure or claim" cell in catalog/README.md's table."""
    try:
        text = (CATALOG / "README.md").read_text(encoding="utf-8")
    except OSError:
        return {}
    return {m[1]: m[2].strip() for m in re.finditer(r"^\| `([^`]+)` \|([^|]+)\|", text, re.M)}


def _claim(path: Path, sweep, claims: dict[str, str]) -> str:
    """What a catalog entry reproduces: its README row, else its first comment line or description."""
    if path.name in claims:
        return claims[path.name]
    first = path.read_text(encoding="utf-8").splitlines()[:1]
    if first and first[0].startswith("#"):
        return first[0].lstrip("#").strip()
    return " ".join(sweep.description.split())


def _cost(sweep) -> str:
    cells, traj, layers = sweep.n_cells, sweep.trajectories, sweep.time.layers
    return f"{cells} cells x {traj} traj x {layers} layers = {cells * traj * layers:.2g}"


@app.command()
def catalog(scale: Optional[str] = ScaleOpt):
    """List the catalog: name, model, cost (cells x trajectories x layers), figure or claim."""
    claims = _catalog_claims()
    for path in sorted(CATALOG.glob("*.yaml")):
        if scale not in (None, "small") and scale not in scales_of(read_spec(path)):
            continue  # no such size of this entry
        try:
            sweep = load_sweep(path, scale)
        except SpecError as err:
            typer.echo(f"{path.stem:22s} invalid: {err}")
            continue
        typer.echo(f"{path.stem:22s} {sweep.model:22s} {_cost(sweep):42s} {_claim(path, sweep, claims)}")


def _calibrate(sweep, target_s: float = 0.2) -> tuple[float, str]:
    """Seconds per trajectory per layer in the sweep's first cell, on this core.

    A warm-up call first (it compiles the kernel, or loads it from numba's cache), then a few
    trajectories of the first partition over more and more layers (the spec's step h) until
    one call takes `target_s` or covers every layer.
    """
    from ..pipeline.models import get_model
    from ..pipeline.plan import Plan
    from ..pipeline.seeds import trajectory_rngs

    for key in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(key, "1")  # as on a worker: one thread per partition
    model, plan = get_model(sweep.model), Plan(sweep)
    part = plan[0]
    coords = plan.coords(part)

    def seconds(ntraj: int, layers: int) -> float:
        short_time = sweep.time.model_copy(
            update={"T": sweep.time.h * layers, "layers": layers, "checkpoints": 1})
        short = sweep.model_copy(update={"time": short_time})
        cell = {**coords, "layers": layers} if "layers" in coords else coords  # a layers axis
        rngs = trajectory_rngs(sweep.seed, cell, range(ntraj))
        start = time.perf_counter()
        model.simulate(short, cell, rngs)
        return time.perf_counter() - start

    seconds(1, 1)
    ntraj, layers = min(part.traj_stop - part.traj_start, 4), min(sweep.time.layers, 10)
    while (elapsed := seconds(ntraj, layers)) < target_s and layers < sweep.time.layers:
        layers = min(sweep.time.layers, layers * 10)
    return elapsed / (ntraj * layers), plan.label(part)


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.2g} ms"
    if seconds < 60:
        return f"{seconds:.2g} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@app.command()
def plan(
    spec: str = SpecArg,
    store: Optional[str] = StoreOpt,
    scale: Optional[str] = ScaleOpt,
    partition_traj: Optional[int] = PartitionOpt,
    workers: Optional[int] = WorkersOpt,
    calibrate: bool = typer.Option(True, help="time a few trajectories of the first cell to "
                                              "estimate the run time"),
):
    """What `run SPEC` would do (partitions, store size, time), computing and writing nothing."""
    from ..pipeline.lock import describe_lock
    from ..pipeline.plan import Plan

    try:
        sweep = resolve_run(spec, store, partition_traj, check_lock=False, scale=scale)
    except (SpecError, StoreError) as err:
        _fail(str(err))
    partitions, todo = len(Plan(sweep)), _to_run(sweep)
    size = estimated_store_bytes(sweep)
    typer.echo(f"{sweep.name}: {sweep.model}, {sweep.n_cells} cells x {sweep.trajectories} "
               f"trajectories x {sweep.time.layers} layers, {len(sweep.time.checkpoint_layers)} "
               "checkpoints")
    typer.echo(f"partitions: {partitions} of {sweep.partition_traj} trajectories, {todo} to run")
    typer.echo(f"store: {sweep.store}: {size} bytes ({format_bytes(size)}) uncompressed")
    lock = describe_lock(sweep.store)
    if lock:
        typer.echo(f"locked by {lock}")
    if not calibrate:
        return
    if _kernels_cold():
        typer.echo("compiling kernels (first run only) ...")
    try:
        per_layer, label = _calibrate(sweep)
    except Exception as err:  # the kernel itself failed: say so in one line
        _fail(f"the calibration run failed ({type(err).__name__}: {_first_line(err)}): "
              "`tokensweep plan --no-calibrate` plans without timing", code=1)
    n_workers = workers or os.cpu_count() or 1
    layers = float(np.mean(sweep.axes.get("layers", sweep.time.layers)))  # a layers axis: its mean
    per_partition = per_layer * layers * sweep.partition_traj
    core = per_layer * layers * sweep.trajectories * sweep.n_cells * todo / partitions
    wall = math.ceil(todo / n_workers) * per_partition
    typer.echo(f"core time: ~{_duration(core)} ({per_layer * 1e6:.3g} us per trajectory and layer "
               f"at {label}); wall time: ~{_duration(wall)} on {n_workers} local workers, plus the "
               "start of the cluster and the report")


# -- stores ----------------------------------------------------------------------------------

@app.command()
def unlock(store: str = StoreArg):
    """Break the lock of STORE left by a sweep that died (check that none is running first)."""
    store = location.normalised(store)  # a file:// URL is its path
    from ..pipeline.lock import break_lock, is_running_here, lock_path, owner_text
    from .flow_lock import mark_crashed

    try:
        if location.is_remote(store):
            location.check_reachable(store)
        found = location.exists(store) or location.exists(lock_path(store))
    except StoreError as err:
        _fail(str(err))
    if not found:
        _fail(f"no store at {store} and no lock beside it: check the path")
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


@app.command()
def status(store: str = StoreArg):
    """Partitions done / pending / failed; each failed one with its cell, block and error."""
    store = location.normalised(store)  # a file:// URL is its path
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
    store: Optional[str] = typer.Argument(None, help="path of a tokensweep zarr store, or the name of "
                                          "a catalog entry (its default store)", show_default=False),
    out: Optional[str] = typer.Option(None, help="output folder", show_default="STORE.report"),
    index: Optional[str] = typer.Option(None, help="write DIR/index.html linking the report of every "
                                        "store under DIR (writing those missing or stale)",
                                        metavar="DIR", show_default="none: report STORE"),
):
    """Write report.html (self-contained), report.md and the figures; --index DIR: every store's."""
    from ..pipeline.reading import store_path
    from ..pipeline.report import write_report
    from ..pipeline.report.index import write_index
    from ..pipeline.store import open_cube

    if (store is None) == (index is None):
        _fail("report: give either STORE (a store or a catalog name) or --index DIR, not both or neither")
    try:
        if index is not None:
            typer.echo(f"index: {write_index(index)}")
            return
        store = location.normalised(store_path(location.normalised(store)))  # file:// URL: its path
        stored_sweep(store)
        flat = read_status(store)
        with open_cube(store) as ds:
            if (flat != DONE).any():
                typer.echo(f"warning: {(flat != DONE).sum()} partitions not done; "
                           "the report covers done partitions' cells only", err=True)
            paths = write_report(ds, Path(out) if out else location.report_dir(store))
    except (StoreError, SpecError) as err:
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


@server_app.command("start")
def server_start(
    database: Optional[str] = typer.Option(
        None, help="the server's database: postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DB",
        show_default="$PREFECT_API_DATABASE_CONNECTION_URL, else SQLite in TOKENSWEEP_HOME"),
):
    """Start (or reuse) tokensweep's local Prefect server and print its API URL."""
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
    """Stop the local Prefect server that tokensweep started (in TOKENSWEEP_HOME)."""
    from .server import stop_server

    typer.echo("stopped" if stop_server() else "no server started by tokensweep is running")


from .boundary import boundary as _boundary  # noqa: E402 (the command's body is its own module)

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
