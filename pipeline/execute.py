"""Running partitions: seeds -> kernel -> outputs -> status, and nothing else.

``run_partition`` is what every executor calls (a Prefect task on Dask, plain Dask,
or a loop in this process). It is idempotent: a partition whose status is already
``done`` is skipped, and a rerun of one that failed or was killed writes exactly the
same numbers, because its randomness depends only on (seed, cell, trajectory).

Order of writes: ``started`` (the partition is running) -> outputs -> timing -> status, each
through the store's one writer of partition chunks (`store.chunks`).
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

from .models import get_model
from .plan import Partition, Plan
from .plugin import check_outputs
from .seeds import trajectory_rngs
from .spec.base import SweepBase
from .spec.recording import declared_outputs
from .store.chunks import Region, StoreArrays
from .store.cube import read_status
from .store.failures import clear_error, write_error
from .store.layout import DONE, FAILED
from .testing import fault_injector

# a test hook (pipeline/testing.py); None unless a test switched fault injection on
_inject_fault = fault_injector()


@dataclass(frozen=True)
class PartitionResult:
    index: int
    skipped: bool
    seconds: float
    nonfinite: int = 0
    host: str = ""


def simulate_partition(sweep: SweepBase, part: Partition, plan: Plan | None = None
                       ) -> dict[str, np.ndarray]:
    """The kernel's outputs for one partition, in memory; no I/O."""
    plan = plan or Plan(sweep)
    coords = plan.coords(part)
    rngs = trajectory_rngs(sweep.seed, coords, range(part.traj_start, part.traj_stop))
    model = get_model(sweep.model)
    outputs = model.simulate(sweep, coords, rngs)
    check_outputs(model, outputs, len(rngs), len(sweep.time.checkpoint_layers), sweep)
    return outputs


def run_partition(sweep: SweepBase, store: str | Path, index: int) -> PartitionResult:
    """Compute and store one partition unless the store already says it is done."""
    plan = Plan(sweep)
    part = plan[index]
    label = plan.label(part)
    host = socket.gethostname()
    chunks = Region.of_partition(plan, StoreArrays(store), part)  # the store's one chunk writer
    if chunks.read("status").item() == DONE:
        return PartitionResult(index, skipped=True, seconds=0.0, host=host)
    started = time.time()
    chunks.write_scalars(started=started)  # running: `tokensweep status` counts it as started
    try:
        if _inject_fault is not None:
            _inject_fault(index)
        outputs = simulate_partition(sweep, part, plan)
        chunks.write_partition(declared_outputs(get_model(sweep.model), sweep), part, outputs)
    except BaseException as exc:
        write_error(store, index, {"label": label, "host": host, "pid": os.getpid(),
                                   "error": describe_failure(exc),
                                   "traceback": traceback.format_exc(), "at": time.time()})
        chunks.write_scalars(started=started, finished=time.time(), status=FAILED)  # status last
        raise
    finished = time.time()
    clear_error(store, index)
    chunks.write_scalars(started=started, finished=finished, status=DONE)  # status last
    nonfinite = int(np.count_nonzero(outputs.get("nonfinite", 0)))
    return PartitionResult(index, skipped=False, seconds=finished - started,
                           nonfinite=nonfinite, host=host)


def pending_partitions(sweep: SweepBase, store: str | Path) -> list[int]:
    """Partitions whose status is not done (pending or failed), in plan order."""
    return [int(i) for i in np.flatnonzero(read_status(store) != DONE)]


def describe_failure(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
