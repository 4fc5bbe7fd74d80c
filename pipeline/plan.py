"""Partitions: the unit of work, of storage and of failure.

A partition is one grid cell times one block of consecutive trajectories. Its region
of the store is exactly one zarr chunk of every output variable (chunks are one cell
wide along the grid axes, all checkpoints, ``partition_traj`` trajectories), so no two
partitions ever write the same chunk, and its completion is one element of the
``status`` variable, indexed by the cell and the trajectory ``block``.

The plan is pure arithmetic over the partition number: a grid of millions of cells
costs no memory until partitions are asked for.

Batches (large sweeps). Beyond ``BATCH_ABOVE`` partitions, one task per partition costs more in
orchestration than trivial partitions cost to compute, and one file per partition and variable
overwhelms the file system. Partitions are then grouped into batches: rectangles of the
(grid axes..., block) index space, of `batch_shape`, the same rectangles as the store's chunks
(`store.variable_layout`), so a batch is one task, one writer, and writes whole chunks that no
other batch touches. Completion stays per partition (`status`). The batch shape is a property of
the store (its chunks), fixed when the store is created (`default_batch_shape`); below the
threshold it is all ones: a batch is one partition and the store is exactly as before.

>>> from tokensweep.pipeline.spec.base import Grid
>>> from tokensweep.pipeline.spec.load import load_sweep
>>> sweep = load_sweep("quickstart").model_copy(update={"grid": Grid(beta=[0.5, 1.0], d=4, n=2),
...     "trajectories": 10, "partition_traj": 4})
>>> plan = Plan(sweep)
>>> len(plan), plan.n_blocks
(6, 3)
>>> plan[4]
Partition(index=4, cell=(1, 0, 0), block=1, traj_start=4, traj_stop=8)
>>> plan.label(plan[5])
'beta=1 d=4 n=2 traj=8:10'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from .spec.base import SweepBase

# Batching: above this many partitions; then about MAX_BATCHES batches per sweep, each chunk at
# most CHUNK_BYTES (a flush rewrites a batch's chunks whole). A batch pays ~30 ms of chunk writes:
# at 10^5 trivial (1 ms) partitions, 512 batches of 200 made that 15 % of the kernels, 128 of 800
# make it 4 %, and still give tasks enough to spread over ~16 workers (flows/sweep.py).
BATCH_ABOVE = 4096
MAX_BATCHES = 128
CHUNK_BYTES = 64 * 2**20


class Partition(NamedTuple):
    index: int
    cell: tuple[int, ...]
    block: int
    traj_start: int
    traj_stop: int


@dataclass(frozen=True)
class Plan:
    sweep: SweepBase

    @cached_property  # the spec builds its axes on every access: a batch asks per partition
    def axes(self) -> dict[str, tuple]:
        return self.sweep.axes

    @cached_property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.axes.values())

    @cached_property
    def n_blocks(self) -> int:
        return math.ceil(self.sweep.trajectories / self.sweep.partition_traj)

    @property
    def index_shape(self) -> tuple[int, ...]:
        """Shape of the partition index space (grid axes..., block): the `status` array's."""
        return (*self.grid_shape, self.n_blocks)

    def __len__(self) -> int:
        return math.prod(self.index_shape)

    def __getitem__(self, index: int) -> Partition:
        if not 0 <= index < len(self):
            raise IndexError(f"partition {index} out of range 0..{len(self) - 1}")
        flat_cell, block = divmod(int(index), self.n_blocks)
        cell = []
        for size in reversed(self.grid_shape):  # np.unravel_index, without its ~5 us per call
            flat_cell, i = divmod(flat_cell, size)
            cell.append(i)
        cell = tuple(reversed(cell))
        start = block * self.sweep.partition_traj
        stop = min(start + self.sweep.partition_traj, self.sweep.trajectories)
        return Partition(index, cell, block, start, stop)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def index_of(self, cell: tuple[int, ...], block: int) -> int:
        return int(np.ravel_multi_index(cell, self.grid_shape)) * self.n_blocks + block

    def coords(self, part: Partition) -> dict[str, float | int]:
        """The parameter values of a partition's cell, by axis name."""
        return {name: values[i] for (name, values), i in zip(self.axes.items(), part.cell)}

    def region(self, part: Partition) -> dict[str, slice]:
        """Where the partition's outputs go in the store (one chunk of each variable)."""
        region = {name: slice(i, i + 1) for name, i in zip(self.axes, part.cell)}
        region["traj"] = slice(part.traj_start, part.traj_stop)
        return region

    def status_region(self, part: Partition) -> dict[str, slice]:
        region = {name: slice(i, i + 1) for name, i in zip(self.axes, part.cell)}
        region["block"] = slice(part.block, part.block + 1)
        return region

    def batch_grid(self, batch_shape: tuple[int, ...]) -> tuple[int, ...]:
        """How many batches along each dimension of the index space."""
        return tuple(-(-n // s) for n, s in zip(self.index_shape, batch_shape))

    def batches_of(self, indices, batch_shape: tuple[int, ...]) -> dict[int, np.ndarray]:
        """Group partition numbers by batch: {batch number: its partitions, in plan order}."""
        indices = np.asarray(indices, dtype=np.int64)
        if not len(indices):
            return {}
        where = np.unravel_index(indices, self.index_shape)
        batch = np.ravel_multi_index([w // s for w, s in zip(where, batch_shape)],
                                     self.batch_grid(batch_shape))
        order = np.argsort(batch, kind="stable")
        starts = np.flatnonzero(np.diff(batch[order], prepend=-1))
        groups = np.split(indices[order], starts[1:])
        return {int(batch[order][s]): g for s, g in zip(starts, groups)}

    def batch_region(self, batch: int, batch_shape: tuple[int, ...]) -> tuple[slice, ...]:
        """A batch's rectangle in the (grid axes..., block) index space."""
        corner = np.unravel_index(batch, self.batch_grid(batch_shape))
        return tuple(slice(int(c) * s, min((int(c) + 1) * s, n))
                     for c, s, n in zip(corner, batch_shape, self.index_shape))

    def batch_partitions(self, batch: int, batch_shape: tuple[int, ...]) -> np.ndarray:
        """Every partition of a batch, in plan order."""
        ranges = [np.arange(r.start, r.stop) for r in self.batch_region(batch, batch_shape)]
        return np.sort(np.ravel_multi_index(np.meshgrid(*ranges, indexing="ij"),
                                            self.index_shape).reshape(-1))

    def label(self, part: Partition) -> str:
        """A human-readable name: used for Prefect task runs and error messages."""
        cell = " ".join(f"{k}={v:g}" for k, v in self.coords(part).items())
        return f"{cell} traj={part.traj_start}:{part.traj_stop}"


def default_batch_shape(sweep: SweepBase, partition_bytes: int = 0) -> tuple[int, ...]:
    """The batch (and chunk) shape a new store of `sweep` gets, over (grid axes..., block).

    All ones up to BATCH_ABOVE partitions. Beyond, about len(plan) / MAX_BATCHES partitions
    (at most CHUNK_BYTES / partition_bytes), filled from the last dimension: whole trailing
    dimensions first, then an even split of the next one, so batches are compact in plan order.

    >>> from tokensweep.pipeline.spec.base import Grid
    >>> from tokensweep.pipeline.spec.load import load_sweep
    >>> sweep = load_sweep("quickstart").model_copy(update={
    ...     "grid": Grid(beta=list(range(1000)), d=list(range(2, 202)), n=2), "trajectories": 1})
    >>> default_batch_shape(sweep), len(Plan(sweep))
    ((8, 200, 1, 1), 200000)
    >>> sweep = sweep.model_copy(update={"grid": Grid(beta=list(range(1000)), d=list(range(2, 1002)), n=2)})
    >>> default_batch_shape(sweep)  # 125 batches of 8000 partitions
    (8, 1000, 1, 1)
    """
    plan = Plan(sweep)
    shape = [1] * len(plan.index_shape)
    if len(plan) <= BATCH_ABOVE:
        return tuple(shape)
    size = len(plan) / MAX_BATCHES
    if partition_bytes:
        size = max(1.0, min(size, CHUNK_BYTES / partition_bytes))
    for dim in reversed(range(len(shape))):
        n = plan.index_shape[dim]
        if size >= n:
            shape[dim], size = n, size / n
            continue
        pieces = max(1, round(n / size))  # split the dimension evenly, as near `size` as can be
        shape[dim] = -(-n // pieces)
        break
    return tuple(shape)
