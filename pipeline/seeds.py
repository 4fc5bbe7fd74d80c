"""Reproducible randomness: one Generator per trajectory, a pure function of
(spec seed, grid cell, trajectory index).

The cell enters through the IEEE-754 bit patterns of its coordinates, in the grid's
axis order, not through its position in the grid. So a trajectory does not depend on
how the grid is partitioned, on worker or thread counts, on the order of execution or
on retries, and a cell keeps its numbers when the grid around it is refined or
extended. Streams come from ``numpy.random.SeedSequence(seed, spawn_key=...)``, whose
hashing makes keys that differ in any word statistically independent.

>>> a = trajectory_rngs(7, {"beta": 1.0, "d": 4, "n": 2}, [0, 1])
>>> b = trajectory_rngs(7, {"beta": 1.0, "d": 4, "n": 2}, [1])
>>> bool(a[1].standard_normal() == b[0].standard_normal())
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

SEEDING_SCHEME = (
    "tokensweep-seeds/1: PCG64(SeedSequence(seed, spawn_key=(float64 bits of each grid "
    "coordinate in axis order..., trajectory index)))"
)


def cell_key(coords: Mapping[str, float]) -> tuple[int, ...]:
    """The 64-bit patterns of a cell's coordinates, in the order given."""
    values = np.array([float(v) for v in coords.values()], dtype=np.float64)
    return tuple(int(w) for w in values.view(np.uint64))


def trajectory_rngs(
    seed: int, coords: Mapping[str, float], trajectories: Iterable[int]
) -> list[np.random.Generator]:
    """One independent PCG64 Generator per trajectory index of one grid cell."""
    key = cell_key(coords)
    return [
        np.random.Generator(
            np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(*key, int(j))))
        )
        for j in trajectories
    ]
