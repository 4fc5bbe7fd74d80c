"""Running a batch: several partitions in one task, written as whole chunks, done per partition.

A batched store (`plan.default_batch_shape`, beyond a few thousand partitions) keeps every
variable in chunks of one batch each (`store.layout.variable_layout`). ``run_batch`` is the only writer
of its batch's chunks. It reads the batch's current values once (done partitions keep theirs),
marks the partitions it will run as started (one write), computes them one after another into
memory and flushes, every ``FLUSH_SECONDS`` and at the end: outputs -> started/finished -> status,
each one whole-chunk write, status last. So the commit rule is the one of `execute.run_partition`:
a partition is done when, and only when, its status says so, and its outputs were written
before. A batch killed mid-way keeps every partition flushed before; its rerun (a Prefect retry,
or the next run) computes only the partitions whose status is not done, and rewrites its chunks
with the same numbers (randomness depends only on seed, cell and trajectory: `seeds.py`). zarr's
local store replaces a chunk atomically (temporary file, then rename), so a kill during a flush
leaves the chunk as it was.

A partition that raises keeps its error beside the store (`failures.py`) and is marked failed;
the batch goes on with the others and raises at the end, naming the failed ones, so that the
task's retry reruns exactly those.

On a store of one chunk per partition (every store below the threshold, and every store written
before batches) a batch is one partition, run by `execute.run_partition` as before.
"""

from __future__ import annotations

import math
import os
import socket
import time
import traceback
from pathlib import Path

import numpy as np

from .execute import PartitionResult, describe_failure, run_partition, simulate_partition
from .models import get_model
from .plan import Plan
from .spec.base import SweepBase
from .spec.recording import declared_outputs
from .store.chunks import Region, StoreArrays
from .store.cube import store_batch_shape
from .store.failures import clear_error, recorded_errors, write_error
from .store.layout import DONE, FAILED
from .testing import fault_injector

FLUSH_SECONDS = 30.0  # the most work a killed batch loses (besides the partition it was on)

_inject_fault = fault_injector()


class BatchError(RuntimeError):
    """Partitions of a batch that failed (the others of the batch are stored)."""


def run_batch(sweep: SweepBase, store: str | Path, batch: int, failed_only: bool = False,
              flush_seconds: float = FLUSH_SECONDS) -> list[PartitionResult]:
    """Compute and store the partitions of `batch` that are not done (only the failed ones
    with failed_only), flushing whole chunks; raises BatchError if any failed."""
    return run_batches(sweep, store, [batch], failed_only, flush_seconds)


def run_batches(sweep: SweepBase, store: str | Path, batches, failed_only: bool = False,
                flush_seconds: float = FLUSH_SECONDS) -> list[PartitionResult]:
    """`run_batch` for each of `batches` in turn (one task's share of a large sweep), on one
    opening of the store: every batch runs even if one fails; then a BatchError naming all
    failed partitions."""
    shape = store_batch_shape(store)
    if math.prod(shape) == 1:  # one chunk per partition: the layout of every small store
        return [run_partition(sweep, store, int(batch)) for batch in batches]
    opened = OpenStore(sweep, str(store))
    results, failures = [], []
    for batch in batches:
        try:
            results += BatchWriter(opened, int(batch), shape).run(failed_only, flush_seconds)
        except BatchError as err:
            failures.append(str(err))
    if failures:
        raise BatchError("; ".join(failures))
    return results


class OpenStore:
    """What every batch of a task reads once: the plan, the declared outputs, the zarr arrays
    (an opening costs milliseconds, a trivial batch's whole kernel time is ~0.1 s) and the
    records of earlier failures."""

    def __init__(self, sweep: SweepBase, store: str):
        self.sweep, self.store, self.plan = sweep, store, Plan(sweep)
        self.arrays = StoreArrays(store)
        self.declared = declared_outputs(get_model(sweep.model), sweep)
        self.recorded = recorded_errors(store)  # records of earlier failures, to clear


class BatchWriter:
    """The in-memory copy of one batch's region of every variable, flushed whole through the
    store's one chunk writer (`store.chunks.Region`)."""

    def __init__(self, opened: OpenStore, batch: int, shape: tuple[int, ...]):
        self.sweep, self.plan, self.store = opened.sweep, opened.plan, opened.store
        self.chunks = Region(self.plan, opened.arrays, self.plan.batch_region(batch, shape))
        self.region = self.chunks.region  # over (grid axes..., block)
        self.partitions = self.plan.batch_partitions(batch, shape)
        self.declared, self.recorded = opened.declared, opened.recorded
        self.outputs = list(self.declared)
        self.values = {"status": self.chunks.read("status")}

    def run(self, failed_only: bool, flush_seconds: float) -> list[PartitionResult]:
        status = self.values["status"]
        host = socket.gethostname()
        local = self.chunks.locals(self.partitions)
        stored = status[tuple(local.T)]
        wanted = stored == FAILED if failed_only else stored != DONE
        results = [PartitionResult(int(i), skipped=True, seconds=0.0, host=host)
                   for i in self.partitions[~wanted]]
        if not wanted.any():
            return results
        todo = zip(self.partitions[wanted].tolist(), map(tuple, local[wanted].tolist()))
        # Outputs of partitions that are not done mean nothing (status decides): a batch with
        # none done starts from the fill values instead of reading its chunks back.
        nothing_done = not (stored == DONE).any()
        for name in (*self.outputs, "started", "finished"):
            fresh = nothing_done and name in self.declared
            self.values[name] = self.chunks.blank(name) if fresh else self.chunks.read(name)
        # running: `tokensweep status` counts them as started, not finished
        self.values["started"][tuple(local[wanted].T)] = time.time()
        self._write("started")
        failures, last_flush, dirty = [], time.monotonic(), False
        for index, where in todo:
            result = self._run_one(index, where, host)
            dirty = True
            if isinstance(result, str):
                failures.append(result)
            else:
                results.append(result)
            if time.monotonic() - last_flush >= flush_seconds:
                self.flush()
                last_flush, dirty = time.monotonic(), False
        if dirty:
            self.flush()
        if failures:
            raise BatchError(f"{len(failures)} of {int(wanted.sum())} partition(s) of the batch "
                             "failed: " + "; ".join(failures))
        return results

    def _run_one(self, index: int, local: tuple[int, ...], host: str) -> PartitionResult | str:
        """One partition into memory: its result, or a line naming its failure."""
        part = self.plan[index]
        started = time.time()
        try:
            if _inject_fault is not None:
                _inject_fault(index)
            outputs = simulate_partition(self.sweep, part, self.plan)
            self.chunks.place(self.values, self.declared, part, local, outputs)
        except Exception as exc:
            label = self.plan.label(part)
            write_error(self.store, index, {"label": label, "host": host, "pid": os.getpid(),
                                            "error": describe_failure(exc),
                                            "traceback": traceback.format_exc(), "at": time.time()})
            self._set_status(local, FAILED, started, time.time())
            return f"partition {index} ({label}): {describe_failure(exc)}"
        finished = time.time()
        if index in self.recorded:
            clear_error(self.store, index)
        self._set_status(local, DONE, started, finished)
        return PartitionResult(index, skipped=False, seconds=finished - started,
                               nonfinite=int(np.count_nonzero(outputs.get("nonfinite", 0))),
                               host=host)

    def _set_status(self, local, status: int, started: float, finished: float) -> None:
        self.values["status"][local] = status
        self.values["started"][local] = started
        self.values["finished"][local] = finished

    def _write(self, name: str) -> None:
        self.chunks.write(name, self.values[name])

    def flush(self) -> None:
        """Outputs, then timing, then status: status last, as for one partition."""
        for name in (*self.outputs, "started", "finished", "status"):
            self._write(name)
