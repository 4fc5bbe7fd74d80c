"""Running partitions: seeds -> kernel -> outputs -> status, and nothing else.

``run_partition`` is what every executor calls (a Prefect task on Dask, plain Dask,
or a loop in this process). It is idempotent: a partition whose status is already
``done`` is skipped, and a rerun of one that failed or was killed writes exactly the
same numbers, because its randomness depends only on (seed, cell, trajectory).

Order of writes: ``started`` (the partition is running) -> outputs -> timing -> status.
A failure first keeps its error beside the store (``STORE.errors/INDEX.json``, with
the host and the traceback) and then marks the status failed.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from . import location
from .models import get_model
from .plan import Partition, Plan
from .plugin import check_outputs
from .seeds import trajectory_rngs
from .spec import SweepBase
from .store import (DONE, FAILED, clear_error, mark_started, read_status, write_error,
                    write_outputs, write_status)
from .testing import fault_injector

# a test hook (pipeline/testing.py); None unless a test switched fault injection on
_inject_fault = fault_injector()


@dataclass(frozen=True)
class PartitionResult:
    index: int
    label: str
    skipped: bool
    seconds: float
    nonfinite: int = 0
    host: str = ""


def simulate_partition(sweep: SweepBase, part: Partition) -> dict[str, np.ndarray]:
    """The kernel's outputs for one partition, in memory; no I/O."""
    plan = Plan(sweep)
    coords = plan.coords(part)
    rngs = trajectory_rngs(sweep.seed, coords, range(part.traj_start, part.traj_stop))
    model = get_model(sweep.model)
    outputs = model.simulate(sweep, coords, rngs)
    check_outputs(model, outputs, len(rngs), len(sweep.time.checkpoint_layers), sweep)
    return outputs


def _partition_done(store: str | Path, plan: Plan, part: Partition) -> bool:
    # chunks=None: plain lazy indexing, no dask. Inside a task on a distributed worker a dask
    # read would be computed on the cluster itself, and the waiting task would free its
    # thread for another partition: two kernels on one single-thread worker.
    with xr.open_zarr(location.zarr_store(store, read_only=True),
                      consolidated=location.consolidated(store), chunks=None) as ds:
        return int(ds["status"].isel(plan.status_region(part)).values.item()) == DONE


def run_partition(sweep: SweepBase, store: str | Path, index: int) -> PartitionResult:
    """Compute and store one partition unless the store already says it is done."""
    plan = Plan(sweep)
    part = plan[index]
    label = plan.label(part)
    host = socket.gethostname()
    if _partition_done(store, plan, part):
        return PartitionResult(index, label, skipped=True, seconds=0.0, host=host)
    started = time.time()
    mark_started(store, plan, part, started)
    try:
        if _inject_fault is not None:
            _inject_fault(index)
        outputs = simulate_partition(sweep, part)
        write_outputs(store, plan, part, outputs)
    except BaseException as exc:
        write_error(store, index, {"label": label, "host": host, "pid": os.getpid(),
                                   "error": describe_failure(exc),
                                   "traceback": traceback.format_exc(), "at": time.time()})
        write_status(store, plan, part, FAILED, started, time.time())
        raise
    finished = time.time()
    clear_error(store, index)
    write_status(store, plan, part, DONE, started, finished)
    nonfinite = int(np.count_nonzero(outputs.get("nonfinite", 0)))
    return PartitionResult(index, label, skipped=False, seconds=finished - started,
                           nonfinite=nonfinite, host=host)


def pending_partitions(sweep: SweepBase, store: str | Path) -> list[int]:
    """Partitions whose status is not done (pending or failed), in plan order."""
    return [int(i) for i in np.flatnonzero(read_status(store) != DONE)]


def describe_failure(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
