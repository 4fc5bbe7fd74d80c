"""Partitions: the unit of work, of storage and of failure.

A partition is one grid cell times one block of consecutive trajectories. Its region
of the store is exactly one zarr chunk of every output variable (chunks are one cell
wide along the grid axes, all checkpoints, ``partition_traj`` trajectories), so no two
partitions ever write the same chunk, and its completion is one element of the
``status`` variable, indexed by the cell and the trajectory ``block``.

The plan is pure arithmetic over the partition number: a grid of millions of cells
costs no memory until partitions are asked for.

>>> from tokensweep.pipeline.spec import Grid, load_sweep
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
from typing import NamedTuple

import numpy as np

from .spec import SweepBase


class Partition(NamedTuple):
    index: int
    cell: tuple[int, ...]
    block: int
    traj_start: int
    traj_stop: int


@dataclass(frozen=True)
class Plan:
    sweep: SweepBase

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.sweep.axes.values())

    @property
    def n_blocks(self) -> int:
        return math.ceil(self.sweep.trajectories / self.sweep.partition_traj)

    def __len__(self) -> int:
        return math.prod(self.grid_shape) * self.n_blocks

    def __getitem__(self, index: int) -> Partition:
        if not 0 <= index < len(self):
            raise IndexError(f"partition {index} out of range 0..{len(self) - 1}")
        flat_cell, block = divmod(index, self.n_blocks)
        cell = tuple(int(i) for i in np.unravel_index(flat_cell, self.grid_shape))
        start = block * self.sweep.partition_traj
        stop = min(start + self.sweep.partition_traj, self.sweep.trajectories)
        return Partition(index, cell, block, start, stop)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def index_of(self, cell: tuple[int, ...], block: int) -> int:
        return int(np.ravel_multi_index(cell, self.grid_shape)) * self.n_blocks + block

    def coords(self, part: Partition) -> dict[str, float | int]:
        """The parameter values of a partition's cell, by axis name."""
        return {name: values[i] for (name, values), i in zip(self.sweep.axes.items(), part.cell)}

    def region(self, part: Partition) -> dict[str, slice]:
        """Where the partition's outputs go in the store (one chunk of each variable)."""
        region = {name: slice(i, i + 1) for name, i in zip(self.sweep.axes, part.cell)}
        region["traj"] = slice(part.traj_start, part.traj_stop)
        return region

    def status_region(self, part: Partition) -> dict[str, slice]:
        region = {name: slice(i, i + 1) for name, i in zip(self.sweep.axes, part.cell)}
        region["block"] = slice(part.block, part.block + 1)
        return region

    def label(self, part: Partition) -> str:
        """A human-readable name: used for Prefect task runs and error messages."""
        cell = " ".join(f"{k}={v:g}" for k, v in self.coords(part).items())
        return f"{cell} traj={part.traj_start}:{part.traj_stop}"
