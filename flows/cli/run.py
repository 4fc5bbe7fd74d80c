"""`tokensweep run` and `rerun`: a sweep computed, with a quiet terminal and its logs in a file.

Everything a run needs is checked before anything is computed or written (`pipeline.prepare`,
the cluster asked for, the lock); then one line says what it will do, a progress bar runs, and
the results are printed; Prefect's and Dask's logs go to STORE.log (to the terminal with -v).
Ctrl-C exits with code 130 and one line saying how far the sweep got.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Optional

import typer

from .common import (
    AccountOpt,
    ClusterOpt,
    CoresOpt,
    JobsOpt,
    MemoryOpt,
    PartitionOpt,
    ProfileOpt,
    ProgressOpt,
    QueueOpt,
    QuietOpt,
    ReportOpt,
    ScaleOpt,
    SchedulerFileOpt,
    SchedulerOpt,
    SpecArg,
    StoreArg,
    StoreOpt,
    VerboseOpt,
    WalltimeOpt,
    WorkersOpt,
    done_count,
    fail,
    first_line,
    interrupted,
    local_problem,
    log_path,
    logs_to,
    normalised_store,
    one_of_quiet_verbose,
    partitions_to_run,
    refuse_if_locked,
    store_target,
    workers_phrase,
)


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
    report: bool = ReportOpt,
    quiet: bool = QuietOpt,
    verbose: bool = VerboseOpt,
):
    """Run a sweep (or resume it: only partitions not done are computed), then report."""
    from ...pipeline.errors import SpecError, StoreError
    from ...pipeline.prepare import prepare_sweep

    one_of_quiet_verbose(quiet, verbose)
    batch = batch_asked(cluster, cluster_profile, workers, scheduler or scheduler_file, queue=queue,
                        account=account, walltime=walltime, memory=memory, jobs=jobs, cores=cores)
    try:
        sweep = prepare_sweep(spec, scale=scale, store=store, partition_traj=partition_traj,
                              check_lock=False)
        refuse_if_locked(store_target(sweep.store))  # a stale lock's flow run: set Crashed
    except (SpecError, StoreError) as err:
        fail(str(err))
    execute(sweep, workers=workers, progress=progress, report=report, quiet=quiet, verbose=verbose,
            batch=batch,
            scheduler=scheduler_asked(scheduler, scheduler_file,
                                      service=service_serves(sweep, workers, batch)))


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
    report: bool = ReportOpt,
    quiet: bool = QuietOpt,
    verbose: bool = VerboseOpt,
):
    """Redo the partitions of STORE that are not done (or only the failed ones), with its own spec."""
    from ...pipeline.errors import StoreError
    from ...pipeline.store.cube import read_status, stored_sweep

    store = normalised_store(store)
    one_of_quiet_verbose(quiet, verbose)
    batch = batch_asked(cluster, cluster_profile, workers, scheduler or scheduler_file, queue=queue,
                        account=account, walltime=walltime, memory=memory, jobs=jobs, cores=cores)
    try:
        sweep = stored_sweep(store).model_copy(update={"store": store})
        read_status(store)
        refuse_if_locked(store_target(store))
    except StoreError as err:
        fail(str(err))
    execute(sweep, workers=workers, failed_only=failed_only, progress=progress, report=report,
            quiet=quiet, verbose=verbose, batch=batch,
            scheduler=scheduler_asked(scheduler, scheduler_file,
                                      service=service_serves(sweep, workers, batch)))


def service_serves(sweep, workers: Optional[int], batch) -> bool:
    """May the run use the local cluster the user started (`tokensweep cluster start`)? Where it
    asks for no workers and no batch cluster, and for a cpu spec: the service's workers declare
    no GPU, so a cuda spec starts its own local workers, one per GPU (docs/cluster.md)."""
    from ..gpus import on_gpu

    return workers is None and batch is None and not on_gpu(sweep)


def scheduler_asked(scheduler: Optional[str], scheduler_file: Optional[str],
                    service: bool = False) -> Optional[str]:
    """The scheduler asked for; else, if `service`, that of the local cluster the user started
    with `tokensweep cluster start` (where one answers)."""
    from ..run import ClusterError, resolve_scheduler

    try:
        address = resolve_scheduler(scheduler, scheduler_file)
        if address or not service:
            return address
        from ..cluster_service import running_scheduler

        return running_scheduler()
    except ClusterError as err:
        fail(str(err))


def batch_asked(cluster, profile, workers, scheduler, **given):
    """The batch cluster asked for (None: local or existing), checked before anything runs."""
    if cluster is None and profile is None and not any(v is not None for v in given.values()):
        return None  # nothing asked: no need to read dask-jobqueue's settings
    from ..jobqueue import JobqueueError, check_submit_command, resolve_options

    try:
        batch = resolve_options(cluster, profile, **given)
        if batch is not None and (workers is not None or scheduler is not None):
            fail(f"--cluster {batch.kind} starts its own workers: leave out --workers, "
                 "--scheduler and --scheduler-file (use --jobs and --cores)")
        if batch is not None:  # the command line first, then this machine: can it submit?
            check_submit_command(batch)
    except JobqueueError as err:
        fail(str(err))
    return batch


def execute(sweep, *, quiet: bool, verbose: bool, progress: bool, workers: Optional[int],
            scheduler: Optional[str], failed_only: bool = False, batch=None,
            report: bool = True) -> None:
    """Run the sweep flow on the cluster chosen, saying what it does and what it wrote."""
    from ...pipeline.errors import SpecError, StoreError
    from ...pipeline.plan import Plan
    from ..clusters import local_workers
    from ..gpus import gpus_for
    from ..run import run_sweep, runs_in_process
    from .compiling import kernels_cold

    if scheduler is None and batch is None:  # local workers: they have what this machine has
        problem = local_problem(sweep)
        if problem:
            fail(problem)

    store, total = store_target(sweep.store), len(Plan(sweep))
    log, todo = log_path(store), partitions_to_run(sweep, failed_only)
    details = "" if verbose else f" (details in {log})"
    refused: tuple = (SpecError, StoreError)  # bad input: exit 2
    if batch is not None:
        from ..jobqueue import JobqueueError, batch_cluster, fit_to_work

        batch = fit_to_work(batch, todo)
        cluster, refused = batch_cluster(batch, todo, sweep), (*refused, JobqueueError)
    else:  # a local or existing cluster: dask-jobqueue is not imported
        cluster = nullcontext(None)
    if not quiet:
        gpus = gpus_for(sweep) if scheduler is None and batch is None else 0
        where = batch.describe() if batch else f"the cluster at {scheduler}" if scheduler else \
            workers_phrase(local_workers(workers, todo, gpus), gpus) \
            if not runs_in_process(todo, sweep, workers) else \
            "this process (no cluster)"  # no idle workers; nor a cluster for one partition
        logs = "" if verbose else f" (logs: {log})"
        typer.echo(f"{sweep.name}: {todo} of {total} partitions to run into {store} on {where}{logs}")
        if scheduler is None and batch is None and todo and kernels_cold(sweep.model):
            typer.echo(f"compiling {sweep.model}'s kernels (first run of this model only): "
                       "the first partitions take ~30 s more")
    try:
        with logs_to(log, verbose), cluster as address:
            summary = run_sweep(sweep.model_dump(mode="json"), sweep.store, workers=workers,
                                scheduler=address or scheduler, failed_only=failed_only,
                                progress=progress and not quiet and not verbose, report=report)
    except refused as err:  # or a job the batch system refused
        fail(str(err))
    except RuntimeError as err:  # partitions failed: the message lists them
        fail(f"{err}{details}", code=1)
    except (KeyboardInterrupt, Exception) as err:
        if interrupted(err):
            typer.echo(f"interrupted: {done_count(store)} of {total} partitions done; "
                       "run the same command to resume", err=True)
            raise typer.Exit(130) from None
        fail(f"the sweep stopped: {type(err).__name__}: {first_line(err)}; {done_count(store)} of "
             f"{total} partitions done{details}; run the same command to resume", code=1)
    if quiet:
        return
    typer.echo(f"computed {summary['computed']} of {summary['partitions']} partitions into "
               f"{summary['store']}")
    report_paths = summary.get("report", {})
    for name in ("html", "report"):  # the page and the markdown; the figures lie beside them
        if name in report_paths:
            typer.echo(f"{name}: {report_paths[name]}")
