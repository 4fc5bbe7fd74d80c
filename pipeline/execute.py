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
import zarr

from . import location
from .models import get_model
from .plan import Partition, Plan
from .plugin import check_outputs
from .seeds import trajectory_rngs
from .spec.base import SweepBase
from .store import DONE, FAILED, clear_error, partition_dataset, read_status, write_error
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


class _PartitionChunks:
    """One partition's chunks of a store, read and written through zarr directly.

    What `store.mark_started`, `write_outputs` and `write_status` write, with the same values
    in the same order, without xarray's per-call opening and checking of the whole store (about
    a tenth of a one-second partition's span). Raw values, as `batch._BatchWriter` writes them:
    the arrays hold exactly what the partition's dataset holds (no encoding is involved)."""

    def __init__(self, store: str | Path, plan: Plan, part: Partition):
        self.group = zarr.open_group(location.zarr_store(store), mode="r+",
                                     use_consolidated=location.consolidated(store))
        self.plan, self.part = plan, part
        self.cell = plan.status_region(part)
        self.arrays: dict[str, zarr.Array] = {}

    def _where(self, name: str, region: dict[str, slice]) -> tuple:
        if name not in self.arrays:
            self.arrays[name] = self.group[name]
        array = self.arrays[name]
        return array, tuple(region.get(dim, slice(None)) for dim in array.metadata.dimension_names)

    def read(self, name: str):
        array, where = self._where(name, self.cell)
        return array[where].item()

    def write(self, **values) -> None:
        """Per-partition scalars (started, finished, status), in the order given."""
        for name, value in values.items():
            array, where = self._where(name, self.cell)
            array[where] = np.full((1,) * len(where), value, dtype=array.dtype)

    def write_outputs(self, outputs: dict[str, np.ndarray]) -> None:
        region = self.plan.region(self.part)
        data = partition_dataset(self.plan, outputs)
        for name, variable in data.data_vars.items():
            array, where = self._where(name, region)
            array[where] = variable.transpose(*array.metadata.dimension_names).values


def run_partition(sweep: SweepBase, store: str | Path, index: int) -> PartitionResult:
    """Compute and store one partition unless the store already says it is done."""
    plan = Plan(sweep)
    part = plan[index]
    label = plan.label(part)
    host = socket.gethostname()
    chunks = _PartitionChunks(store, plan, part)
    if chunks.read("status") == DONE:
        return PartitionResult(index, skipped=True, seconds=0.0, host=host)
    started = time.time()
    chunks.write(started=started)  # running: `tokensweep status` counts it as started
    try:
        if _inject_fault is not None:
            _inject_fault(index)
        outputs = simulate_partition(sweep, part, plan)
        chunks.write_outputs(outputs)
    except BaseException as exc:
        write_error(store, index, {"label": label, "host": host, "pid": os.getpid(),
                                   "error": describe_failure(exc),
                                   "traceback": traceback.format_exc(), "at": time.time()})
        chunks.write(started=started, finished=time.time(), status=FAILED)  # status last
        raise
    finished = time.time()
    clear_error(store, index)
    chunks.write(started=started, finished=finished, status=DONE)  # status last
    nonfinite = int(np.count_nonzero(outputs.get("nonfinite", 0)))
    return PartitionResult(index, skipped=False, seconds=finished - started,
                           nonfinite=nonfinite, host=host)


def pending_partitions(sweep: SweepBase, store: str | Path) -> list[int]:
    """Partitions whose status is not done (pending or failed), in plan order."""
    return [int(i) for i in np.flatnonzero(read_status(store) != DONE)]


def describe_failure(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
