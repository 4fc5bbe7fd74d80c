"""The Prefect ``sweep`` flow: wiring only, every step is one pipeline call.

validate -> lock -> prepare store (create, resume or grow) -> plan -> one task per
partition not yet done (on whatever
task runner the caller chose, a DaskTaskRunner by default) -> report. Tasks are
idempotent (the store's status decides), so a rerun of the flow, from the CLI or the
UI's Retry, only computes partitions that are not done. Tasks neither cache nor persist
results (``cache_policy=NONE``): a cached "done" could outlive the store it describes,
and a retried flow run must ask the store again, never Prefect.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.futures import as_completed
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..pipeline.execute import pending_partitions, run_partition
from ..pipeline.plan import Plan
from ..pipeline.spec import parse_sweep
from ..pipeline.store import FAILED, open_cube, prepare_store, read_status, record_provenance
from .flow_lock import flow_lock

PARTITION_RETRIES = 2


@task(
    name="partition",
    task_run_name="{label}",
    retries=PARTITION_RETRIES,
    retry_delay_seconds=1,
    cache_policy=NONE,  # the store's status, not Prefect's cache, decides what is done
    persist_result=False,
)
def partition_task(spec: dict, store: str, index: int, label: str) -> dict:
    return asdict(run_partition(parse_sweep(spec), store, index))


@task(name="report", cache_policy=NONE)
def report_task(store: str) -> dict:
    from ..pipeline.report import write_report

    with open_cube(store) as ds:
        paths = write_report(ds, report_dir(store))
    return {k: str(v) for k, v in paths.items()}


def report_dir(store: str | Path) -> Path:
    return Path(store).with_suffix(".report")


@flow(name="sweep", flow_run_name="{spec[name]} @ {store}")
def sweep_flow(spec: dict, store: str, failed_only: bool = False, progress: bool = True) -> dict:
    """Run every partition of `spec` that `store` does not hold yet (or only the failed
    ones), then report. Safe to retry: done partitions are never recomputed."""
    logger = get_run_logger()
    sweep = parse_sweep(spec, store=store)
    with flow_lock(store):  # before the store is created or grown: two new runs never collide
        created = prepare_store(sweep, store)
        plan = Plan(sweep)
        if failed_only:
            todo = [int(i) for i in (read_status(store) == FAILED).nonzero()[0]]
        else:
            todo = pending_partitions(sweep, store)
        logger.info("%s store %s: %d of %d partitions to run", created, store, len(todo), len(plan))
        computed, failed, hosts = _run_partitions(sweep.model_dump(mode="json"), store, plan, todo,
                                                  progress)
        record_provenance(store, hosts)

    summary = {"store": store, "partitions": len(plan), "computed": computed, "failed": len(failed)}
    if failed:
        raise RuntimeError(
            f"{len(failed)} partition(s) failed after {PARTITION_RETRIES} retries; "
            f"rerun the same command (or Retry the flow run) to redo only those:\n  "
            + "\n  ".join(failed)
        )
    summary["report"] = report_task(store)
    return summary


def _run_partitions(spec: dict, store: str, plan: Plan, todo: list[int], progress: bool):
    futures = [partition_task.submit(spec, store, i, plan.label(plan[i])) for i in todo]
    index_of = {f.task_run_id: i for f, i in zip(futures, todo)}
    computed, failed, hosts = 0, [], set()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    # stderr is not redirected above the bar: the CLI sends it (Prefect's and Dask's logs) to STORE.log
    with Progress(*columns, disable=not progress, redirect_stderr=False) as bar:
        tracker = bar.add_task(spec["name"], total=len(futures))
        for future in as_completed(futures):
            try:
                result = future.result()
                computed += not result["skipped"]
                if not result["skipped"]:
                    hosts.add(result["host"])
            except Exception as exc:  # listed below; the other partitions go on
                index = index_of[future.task_run_id]
                failed.append(f"partition {index} ({plan.label(plan[index])}): {exc}")
            bar.advance(tracker)
    return computed, failed, hosts
