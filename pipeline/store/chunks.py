"""The one writer of partition chunks: a rectangle of a store's partitions, read and written as raw
zarr values.

Every sweep writes through it: a partition alone (`execute.run_partition`), a batch of partitions
held in memory and flushed whole (`batch.run_batch`), a grow copying done partitions into the
grown cube (`grow.copy_done_partitions`). A `Region` is a rectangle of the partition index space
(grid axes..., block) of one store; each variable's part of it is a tuple of slices over the
variable's own dimensions (grid axes, ``block``, ``traj`` for the region's trajectories, every
other dimension whole). Values are the stored ones: no CF encoding or decoding is involved, so a
value read is the value written, and a chunk no partition wrote reads as the variable's fill value
(`layout.fill_value`). Going through zarr directly skips xarray's per-call opening and checking of
the whole store (about a tenth of a one-second partition's span).

The commit rule is the caller's, and is the same everywhere: outputs, then ``started`` and
``finished``, then ``status`` last, so a partition is done when, and only when, its status says so.

>>> import tempfile
>>> from tokensweep.pipeline.plan import Plan
>>> from tokensweep.pipeline.spec.load import load_sweep
>>> from tokensweep.pipeline.store.cube import create_store, read_status
>>> sweep = load_sweep("quickstart")
>>> store = tempfile.mkdtemp() + "/cube.zarr"
>>> create_store(sweep, store)
>>> plan = Plan(sweep)
>>> write_status(store, plan, plan[3], DONE, started=1.0, finished=2.0)
>>> read_status(store)[:5].tolist()
[0, 0, 0, 1, 0]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

from ..models import get_model
from ..plan import Partition, Plan
from ..spec.recording import declared_outputs
from . import location
from .layout import DONE, FAILED, PENDING

__all__ = ["StoreArrays", "Region", "write_outputs", "write_status", "PENDING", "DONE", "FAILED",
           "TIMING"]

TIMING = ("started", "finished")  # per-partition times, written after the outputs, before status


class StoreArrays:
    """A store's zarr arrays by name, each opened on first use (a partition that is already done
    opens only ``status``); one opening serves every region of a task."""

    def __init__(self, store: str | Path, mode: str = "r+"):
        self.group = zarr.open_group(location.zarr_store(store, read_only=mode == "r"), mode=mode,
                                     use_consolidated=location.consolidated(store))
        self._arrays: dict[str, zarr.Array] = {}

    def __getitem__(self, name: str) -> zarr.Array:
        if name not in self._arrays:
            self._arrays[name] = self.group[name]
        return self._arrays[name]


class Region:
    """A rectangle of a store's partitions, over (grid axes..., block) (`plan.batch_region`)."""

    def __init__(self, plan: Plan, arrays: StoreArrays, region: tuple[slice, ...]):
        self.plan, self.arrays, self.region = plan, arrays, region
        self._selections: dict[str, tuple[slice, ...]] = {}

    @classmethod
    def of_partition(cls, plan: Plan, arrays: StoreArrays, part: Partition) -> Region:
        """One partition: its cell and its block (one chunk of every variable, unbatched)."""
        return cls(plan, arrays, (*(slice(i, i + 1) for i in part.cell), slice(part.block, part.block + 1)))

    def selection(self, name: str) -> tuple[slice, ...]:
        """The region's part of a variable, over the variable's dimensions."""
        if name not in self._selections:
            axes = list(self.plan.axes)
            blocks = self.region[-1]
            pt, ntraj = self.plan.sweep.partition_traj, self.plan.sweep.trajectories
            out = []
            for dim in self.arrays[name].metadata.dimension_names:
                if dim in axes:
                    out.append(self.region[axes.index(dim)])
                elif dim == "block":
                    out.append(blocks)
                elif dim == "traj":
                    out.append(slice(blocks.start * pt, min(blocks.stop * pt, ntraj)))
                else:  # checkpoints and trailing dimensions: whole
                    out.append(slice(None))
            self._selections[name] = tuple(out)
        return self._selections[name]

    def read(self, name: str) -> np.ndarray:
        return np.asarray(self.arrays[name][self.selection(name)])

    def blank(self, name: str) -> np.ndarray:
        """The region of a variable as an unwritten chunk reads: all fill value."""
        array = self.arrays[name]
        shape = tuple(len(range(*where.indices(n))) for where, n in zip(self.selection(name), array.shape))
        return np.full(shape, array.fill_value, dtype=array.dtype)

    def write(self, name: str, values: np.ndarray) -> None:
        self.arrays[name][self.selection(name)] = values

    def write_scalars(self, **values) -> None:
        """Per-partition values (started, finished, status) of a one-partition region, in the
        order given."""
        for name, value in values.items():
            self.write(name, np.full((1,) * len(self.selection(name)), value, dtype=self.arrays[name].dtype))

    def locals(self, indices: np.ndarray) -> np.ndarray:
        """Partitions' positions in the region, one row each (over grid axes..., block)."""
        where = np.unravel_index(indices, self.plan.index_shape)
        return np.stack([w - r.start for w, r in zip(where, self.region)], axis=-1)

    def place(self, buffers: dict[str, np.ndarray], declared: dict, part: Partition,
              local: tuple[int, ...], outputs: dict[str, np.ndarray]) -> None:
        """Put a partition's outputs (the kernel's layout: traj first, then t where per
        checkpoint, then trailing dimensions) at its place `local` in the region's `buffers`,
        transposed to the store's dimension order (numpy only: an xarray Dataset per partition
        cost more than a trivial partition's kernel)."""
        axes = list(self.plan.axes)
        offset = part.traj_start - self.region[-1].start * self.plan.sweep.partition_traj
        traj = slice(offset, offset + part.traj_stop - part.traj_start)
        for name, spec in declared.items():
            values = np.asarray(outputs[name], dtype=spec.dtype)
            if spec.per_checkpoint:  # kernel: (traj, t, ...)
                values, dims = np.swapaxes(values, 0, 1), ("t", "traj", *spec.extra_dims)
            else:
                dims = ("traj", *spec.extra_dims)
            stored = self.arrays[name].metadata.dimension_names
            where = tuple(local[axes.index(d)] if d in axes else traj if d == "traj" else slice(None)
                          for d in stored)
            buffers[name][where] = np.transpose(values, [dims.index(d) for d in stored if d not in axes])

    def write_partition(self, declared: dict, part: Partition, outputs: dict[str, np.ndarray]) -> None:
        """A one-partition region's outputs: exactly one chunk of every output variable."""
        local = (0,) * len(self.region)
        buffers = {name: self.blank(name) for name in declared}
        self.place(buffers, declared, part, local, outputs)
        for name in declared:
            self.write(name, buffers[name])


def write_outputs(store: str | Path, plan: Plan, part: Partition, outputs: dict[str, np.ndarray]) -> None:
    """Write one partition's outputs (not its status: it stays pending)."""
    region = Region.of_partition(plan, StoreArrays(store), part)
    region.write_partition(declared_outputs(get_model(plan.sweep.model), plan.sweep), part, outputs)


def write_status(store: str | Path, plan: Plan, part: Partition, status: int,
                 started: float = np.nan, finished: float = np.nan) -> None:
    """Record a partition's timing, then its status (status last)."""
    Region.of_partition(plan, StoreArrays(store), part).write_scalars(
        started=started, finished=finished, status=status)
