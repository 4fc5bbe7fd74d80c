"""The Prefect ``sweep`` flow: wiring only, every step is one pipeline call.

validate (`pipeline.prepare`) -> lock -> prepare store (create, resume or grow) -> plan -> one task per
partition not yet done, or, for a batched store (more than a few thousand partitions), tasks
of batches holding such partitions (`pipeline/batch.py`), TASKS_PER_WORKER per worker of the
cluster, each a share of the batches dealt as teams are picked (on whatever task runner
the caller chose, a DaskTaskRunner by default) -> report. Tasks are idempotent (the store's
status decides), so a rerun of the flow, from the CLI or the UI's Retry, only computes
partitions that are not done. Tasks neither cache nor persist results (``cache_policy=NONE``):
a cached "done" could outlive the store it describes, and a retried flow run must ask the store
again, never Prefect.
"""

from __future__ import annotations

import threading

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.context import FlowRunContext
from prefect.futures import as_completed
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..pipeline.batch import run_batches
from ..pipeline.execute import pending_partitions, run_partition
from ..pipeline.plan import Plan
from ..pipeline.prepare import prepare_sweep
from ..pipeline.spec.load import parse_sweep
from ..pipeline.store import location
from ..pipeline.store.cube import open_cube, read_status, record_provenance, store_batch_shape
from ..pipeline.store.layout import FAILED
from ..pipeline.store.lifecycle import prepare_store
from .flow_lock import flow_lock
from .gpus import gpu_tasks, routed_gpu_workers

PARTITION_RETRIES = 2
# A large sweep's batches go to this many tasks per worker thread, each a sample of the grid's
# batches (`_shares`) so that tasks cost alike: two let a worker that finishes early take over
# another's second task, and keep Prefect's cost per task small (a submit serialises the whole
# Prefect context, ~0.1-0.2 s of the flow process's CPU; 10^5 trivial partitions were once 500
# tasks).
TASKS_PER_WORKER = 2
WORKERS_UNKNOWN = 8  # assumed when the cluster has no worker yet (an adaptive one, starting)


@task(
    name="partition",
    task_run_name="{label}",
    retries=PARTITION_RETRIES,
    retry_delay_seconds=1,
    cache_policy=NONE,  # the store's status, not Prefect's cache, decides what is done
    persist_result=False,
)
def partition_task(spec: dict, store: str, index: int, label: str) -> dict:
    return _summary([run_partition(parse_sweep(spec), store, index)])


@task(
    name="batch",
    task_run_name="{label}",
    retries=PARTITION_RETRIES,
    retry_delay_seconds=1,
    cache_policy=NONE,
    persist_result=False,
)
def batch_task(spec: dict, store: str, batches: list[int], label: str, failed_only: bool) -> dict:
    return _summary(run_batches(parse_sweep(spec), store, batches, failed_only))


def _summary(results) -> dict:
    """What the flow needs of a task's partitions: how many were computed, and where."""
    computed = [r for r in results if not r.skipped]
    return {"computed": len(computed), "hosts": sorted({r.host for r in computed})}


@task(name="report", cache_policy=NONE)
def report_task(store: str) -> dict:
    from ..pipeline.report import write_report

    with open_cube(store) as ds:
        paths = write_report(ds, location.report_dir(store))
    return {k: str(v) for k, v in paths.items()}


@flow(name="sweep", flow_run_name="{spec[name]} @ {store}")
def sweep_flow(spec: dict, store: str, failed_only: bool = False, progress: bool = True,
               report: bool = True) -> dict:
    """Run every partition of `spec` that `store` does not hold yet (or only the failed
    ones), then report (unless `report` is False: a round of a search, whose caller reads the
    store). Safe to retry: done partitions are never recomputed."""
    try:
        return _sweep(spec, store, failed_only, progress, report)
    except Exception as err:
        if interrupted(err):  # Ctrl-C as such: the run is Crashed ("interrupt"), not Failed
            raise KeyboardInterrupt from None
        raise


def interrupted(err: BaseException) -> bool:
    """Ctrl-C (or the sweep process's SIGTERM): a KeyboardInterrupt, or one that pydantic-core
    wrapped because it struck inside a serializer function (as Prefect submits a task, or reads
    a result): it turns whatever such a function raises into a PydanticSerializationError,
    which Prefect would report as a Failed run with that traceback."""
    return isinstance(err, KeyboardInterrupt) or (
        type(err).__name__ == "PydanticSerializationError" and "KeyboardInterrupt" in str(err))


def _sweep(spec: dict, store: str, failed_only: bool, progress: bool, report: bool) -> dict:
    logger = get_run_logger()
    # the one pre-run check, as the CLI and the API make it: a run launched from the UI (or
    # `serve`) gets the same refusals, before anything is created; the lock is taken below
    sweep = prepare_sweep(spec, store=store, check_lock=False)
    with flow_lock(store):  # before the store is created or grown: two new runs never collide
        created = prepare_store(sweep, store)
        plan = Plan(sweep)
        if failed_only:
            todo = [int(i) for i in (read_status(store) == FAILED).nonzero()[0]]
        else:
            todo = pending_partitions(sweep, store)
        logger.info("%s store %s: %d of %d partitions to run", created, store, len(todo), len(plan))
        computed, failed, hosts = _run_partitions(sweep, store, plan, todo, progress,
                                                  failed_only, report)
        record_provenance(store, hosts)

    summary = {"store": store, "partitions": len(plan), "computed": computed, "failed": len(failed)}
    if failed:
        raise RuntimeError(
            f"{len(failed)} {'batch(es)' if failed[0].startswith('batch') else 'partition(s)'} "
            f"failed after {PARTITION_RETRIES} retries; "
            f"rerun the same command (or Retry the flow run) to redo only those:\n  "
            + "\n  ".join(failed)
        )
    if report:
        summary["report"] = report_task(store)
    return summary


def _submit(spec: dict, store: str, plan: Plan, todo: list[int], failed_only: bool) -> dict:
    """One task per partition, or per batch of a batched store: {task run id: (future, what it
    runs (a line for errors), how many partitions)}; those of a cuda spec on the cluster's GPU
    workers, where it has some (`gpus.routed_gpu_workers`)."""
    routed = routed_gpu_workers(spec, _dask_client())
    if routed:
        get_run_logger().info("device cuda: each task on one of the cluster's %d GPU workers", routed)
    with gpu_tasks(routed):
        return _submit_tasks(spec, store, plan, todo, failed_only)


def _submit_tasks(spec: dict, store: str, plan: Plan, todo: list[int], failed_only: bool) -> dict:
    shape = store_batch_shape(store)
    if all(s == 1 for s in shape):
        futures = {i: partition_task.submit(spec, store, i, plan.label(plan[i])) for i in todo}
        return {f.task_run_id: (f, f"partition {i} ({plan.label(plan[i])})", 1)
                for i, f in futures.items()}
    groups = plan.batches_of(todo, shape)
    batches = list(groups)
    tasks = {}
    for share in _shares(batches, min(len(batches), _task_count())):
        size = sum(len(groups[b]) for b in share)
        label = (f"batch {share[0]}: {plan.label(plan[int(groups[share[0]][0])])} .. "
                 f"{plan.label(plan[int(groups[share[0]][-1])])} ({size})" if len(share) == 1 else
                 f"batches {share[0]}, {share[1]}, .. {share[-1]} ({len(share)} of {len(batches)}, "
                 f"{size} partitions)")
        future = batch_task.submit(spec, store, share, label, failed_only)
        tasks[future.task_run_id] = (future, label, size)
    return tasks


def _shares(batches: list[int], count: int) -> list[list[int]]:
    """`count` shares of the batches, each in grid order, dealt as teams are picked: the i-th
    batch goes to share i % count in even rounds of `count`, to count - 1 - i % count in odd
    ones. So each share samples the whole grid, and tasks cost alike where the cost drifts or repeats over the
    grid: every count-th batch aliases with a repeat (paper-scale [GLPR-P] Fig. 3's batches
    alternate between cheap and costly d: four tasks on 2 workers took 26, 41, 25 and 39 min,
    one core idle for the last 28.5)."""
    shares = [[] for _ in range(count)]
    for i, b in enumerate(batches):
        turn, seat = divmod(i, count)
        shares[seat if turn % 2 == 0 else count - 1 - seat].append(b)
    return shares


def _task_count() -> int:
    """How many tasks a batched sweep's batches are spread over: TASKS_PER_WORKER per worker
    thread the flow's Dask cluster has now (WORKERS_UNKNOWN when it has none, or no client)."""
    try:
        threads = sum(_dask_client().nthreads().values())
    except Exception:  # another task runner, or a cluster not reachable yet
        threads = 0
    return TASKS_PER_WORKER * (threads or WORKERS_UNKNOWN)


def _dask_client():
    """The flow's Dask client; None on another task runner (in_process.py's)."""
    try:
        return FlowRunContext.get().task_runner.client
    except Exception:  # no Dask task runner, or its cluster is not reachable yet
        return None


def _run_partitions(sweep, store: str, plan: Plan, todo: list[int], progress: bool,
                    failed_only: bool = False, report: bool = False):
    tasks = _submit(sweep.model_dump(mode="json"), store, plan, todo, failed_only)
    if report:
        _import_report_modules(sweep)
    computed, failed, hosts = 0, [], set()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    # stderr is not redirected above the bar: the CLI sends it (Prefect's and Dask's logs) to STORE.log
    with Progress(*columns, disable=not progress, redirect_stderr=False) as bar:
        tracker = bar.add_task(sweep.name, total=len(todo))
        for future in as_completed([f for f, _, _ in tasks.values()]):
            _, what, count = tasks[future.task_run_id]
            try:
                result = future.result()
                computed += result["computed"]
                hosts.update(result["hosts"])
            except Exception as exc:  # listed below; the other partitions go on
                if interrupted(exc):
                    raise
                failed.append(f"{what}: {exc}")
            bar.advance(tracker, count)
    return computed, failed, hosts


def _import_report_modules(sweep) -> None:
    """Import the report's modules (matplotlib, scipy.stats: ~2 s) in a background thread while
    this process waits on the partitions it has submitted; not before: the thread would hold
    the interpreter's lock while this process creates the flow run, the store and the tasks,
    and the workers would wait for their first partition."""
    def imports():
        try:
            from ..pipeline.models import get_model
            from ..pipeline.report import write_report  # noqa: F401

            get_model(sweep.model).sections(sweep)  # imports its report modules
        except Exception:  # the report itself will say what is wrong
            pass

    threading.Thread(target=imports, name="report-imports", daemon=True).start()
