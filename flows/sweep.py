"""The Prefect ``sweep`` flow: wiring only, every step is one pipeline call.

validate -> plan -> prepare store -> one task per partition not yet done (on whatever
task runner the caller chose, a DaskTaskRunner by default) -> report. Tasks are
idempotent (the store's status decides), so a rerun of the flow, from the CLI or the
UI's Retry, only computes partitions that are not done.
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
from ..pipeline.store import open_cube, prepare_store

PARTITION_RETRIES = 2


@task(
    name="partition",
    task_run_name="{label}",
    retries=PARTITION_RETRIES,
    retry_delay_seconds=1,
    cache_policy=NONE,  # the store's status, not Prefect's cache, decides what is done
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


@flow(name="sweep", flow_run_name="{spec[name]}")
def sweep_flow(spec: dict, store: str, progress: bool = True) -> dict:
    """Run every partition of `spec` that `store` does not hold yet, then report."""
    logger = get_run_logger()
    sweep = parse_sweep(spec, store=store)
    created = prepare_store(sweep, store)
    plan = Plan(sweep)
    pending = pending_partitions(sweep, store)
    logger.info("%s store %s: %d of %d partitions to run", created, store, len(pending), len(plan))
    spec = sweep.model_dump(mode="json")
    futures = [partition_task.submit(spec, store, i, plan.label(plan[i])) for i in pending]

    computed, failed = 0, []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not progress) as bar:
        tracker = bar.add_task(f"{sweep.name}", total=len(futures))
        for future in as_completed(futures):
            try:
                computed += not future.result()["skipped"]
            except Exception as exc:  # reported below; the other partitions go on
                failed.append(f"{future.task_run_id}: {exc}")
            bar.advance(tracker)

    summary = {"store": store, "partitions": len(plan), "computed": computed, "failed": len(failed)}
    if failed:
        raise RuntimeError(
            f"{len(failed)} partition(s) failed after {PARTITION_RETRIES} retries; "
            f"rerun the same command (or Retry the flow run) to redo only those:\n  "
            + "\n  ".join(failed)
        )
    summary["report"] = report_task(store)
    return summary
