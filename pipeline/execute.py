"""Running partitions: seeds -> kernel -> outputs -> status, and nothing else.

``run_partition`` is what every executor calls (a Prefect task on Dask, plain Dask,
or a loop in this process). It is idempotent: a partition whose status is already
``done`` is skipped, and a rerun of one that failed or was killed writes exactly the
same numbers, because its randomness depends only on (seed, cell, trajectory).
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from .models import model_entry
from .plan import Partition, Plan
from .seeds import trajectory_rngs
from .spec import SweepBase
from .store import DONE, FAILED, read_status, write_outputs, write_status

# Test-only fault injection: "INDEX[,INDEX...]" makes those partitions raise.
FAIL_PARTITIONS_ENV = "TOKENSWEEP_FAIL_PARTITIONS"


@dataclass(frozen=True)
class PartitionResult:
    index: int
    label: str
    skipped: bool
    seconds: float
    nonfinite: int = 0


def simulate_partition(sweep: SweepBase, part: Partition) -> dict[str, np.ndarray]:
    """The kernel's outputs for one partition, in memory; no I/O."""
    plan = Plan(sweep)
    coords = plan.coords(part)
    rngs = trajectory_rngs(sweep.seed, coords, range(part.traj_start, part.traj_stop))
    return model_entry(sweep.model).simulate(sweep, coords, rngs)


def _partition_done(store: Path, plan: Plan, part: Partition) -> bool:
    with xr.open_zarr(store, consolidated=False) as ds:
        return int(ds["status"].isel(plan.status_region(part)).values.item()) == DONE


def _injected_failure(index: int) -> None:
    wanted = os.environ.get(FAIL_PARTITIONS_ENV, "")
    if str(index) in wanted.split(","):
        raise RuntimeError(f"injected failure in partition {index} ({FAIL_PARTITIONS_ENV})")


def run_partition(sweep: SweepBase, store: str | Path, index: int) -> PartitionResult:
    """Compute and store one partition unless the store already says it is done."""
    plan = Plan(sweep)
    part = plan[index]
    label = plan.label(part)
    if _partition_done(Path(store), plan, part):
        return PartitionResult(index, label, skipped=True, seconds=0.0)
    started = time.time()
    try:
        _injected_failure(index)
        outputs = simulate_partition(sweep, part)
        write_outputs(store, plan, part, outputs)
    except BaseException:
        write_status(store, plan, part, FAILED, started, time.time())
        raise
    finished = time.time()
    write_status(store, plan, part, DONE, started, finished)
    nonfinite = int(np.count_nonzero(outputs.get("nonfinite", 0)))
    return PartitionResult(index, label, skipped=False, seconds=finished - started,
                           nonfinite=nonfinite)


def pending_partitions(sweep: SweepBase, store: str | Path) -> list[int]:
    """Partitions whose status is not done (pending or failed), in plan order."""
    return [int(i) for i in np.flatnonzero(read_status(store) != DONE)]


def describe_failure(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
