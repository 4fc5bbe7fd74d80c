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
    """One independent PCG64 Generator per trajectory index of one grid cell.

    The same Generators as ``PCG64(SeedSequence(seed, spawn_key=(*key, j)))``, bit for bit, but
    SeedSequence's hashing runs once per cell over all trajectories as uint32 array arithmetic
    (`_pcg64_seeds`): 2048 Generators took 70 ms one SeedSequence each, 90 % of it in the
    hashing's Python overhead, a tenth of a trajectory's cost at n = d = 32.
    """
    key = cell_key(coords)
    index = np.fromiter((int(j) for j in trajectories), dtype=np.int64)
    if index.size and (index.min() < 0 or index.max() > _MASK32):
        raise ValueError(f"trajectory indices must lie in 0..{_MASK32}")
    states = _pcg64_seeds(int(seed), key, index.astype(np.uint32))
    return [np.random.Generator(np.random.PCG64(_Seeded(state, int(seed), (*key, int(j)))))
            for state, j in zip(states, index.tolist())]


# numpy's SeedSequence (numpy/random/bit_generator.pyx, after M. E. O'Neill's seed_seq_fe)
_POOL = 4
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _SHIFT, _MASK32 = 0xCA01F9DD, 0x4973F715, 16, 0xFFFFFFFF


def _words(value: int) -> list[int]:
    """A non-negative integer as uint32 words, lowest first ([0] for 0), as SeedSequence reads it."""
    if value < 0:
        raise ValueError("expected a non-negative integer")
    words = [value & _MASK32]
    while value > _MASK32:
        value >>= 32
        words.append(value & _MASK32)
    return words


@np.errstate(over="ignore")
def _pcg64_seeds(seed: int, key: tuple[int, ...], index: np.ndarray) -> np.ndarray:
    """``SeedSequence(seed, spawn_key=(*key, j)).generate_state(4, np.uint64)`` for every j of
    index (uint32), as a (len(index), 4) uint64 array: the same hashing, with each entropy word
    an array over the trajectories (only the last word, j, differs between them)."""
    run = _words(seed)
    run += [0] * (_POOL - len(run))  # a spawn key is given: run entropy padded to the pool
    entropy = [np.full(index.shape, w, np.uint32) for w in run + [w for k in key for w in _words(k)]]
    entropy.append(index)
    const = _INIT_A

    def hashmix(value):
        nonlocal const
        value = value ^ np.uint32(const)
        const = (const * _MULT_A) & _MASK32
        value = value * np.uint32(const)
        return value ^ (value >> np.uint32(_SHIFT))

    def mix(x, y):
        result = np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y
        return result ^ (result >> np.uint32(_SHIFT))

    pool = [hashmix(entropy[i]) for i in range(_POOL)]  # len(entropy) > _POOL: run is padded
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(_POOL, len(entropy)):
        for dst in range(_POOL):
            pool[dst] = mix(pool[dst], hashmix(entropy[src]))
    # generate_state(4, uint64): 8 uint32 words cycling over the pool, read as little-endian pairs
    const, state = _INIT_B, np.empty((index.size, 8), np.uint32)
    for i in range(8):
        value = pool[i % _POOL] ^ np.uint32(const)
        const = (const * _MULT_B) & _MASK32
        value = value * np.uint32(const)
        state[:, i] = value ^ (value >> np.uint32(_SHIFT))
    return state.astype("<u4").view("<u8").astype(np.uint64)


class _Seeded:
    """The seed sequence of a `trajectory_rngs` Generator: its state computed beforehand, and
    the entropy and spawn key it came from (`starts.trajectory_index` reads the key's last word);
    spawning goes through numpy's SeedSequence."""

    __slots__ = ("state", "entropy", "spawn_key", "_sequence")
    pool_size = _POOL

    def __init__(self, state: np.ndarray, entropy: int, spawn_key: tuple[int, ...]):
        self.state, self.entropy, self.spawn_key, self._sequence = state, entropy, spawn_key, None

    @property
    def sequence(self) -> np.random.SeedSequence:
        """numpy's own SeedSequence, made on first use (it counts the children spawned)."""
        if self._sequence is None:
            self._sequence = np.random.SeedSequence(self.entropy, spawn_key=self.spawn_key)
        return self._sequence

    @property
    def n_children_spawned(self) -> int:
        return 0 if self._sequence is None else self._sequence.n_children_spawned

    def generate_state(self, n_words, dtype=np.uint32):
        if n_words == 4 and np.dtype(dtype) == np.uint64:  # what PCG64 asks for
            return self.state.copy()
        return self.sequence.generate_state(n_words, dtype)

    def spawn(self, n_children):
        return self.sequence.spawn(n_children)

    def __repr__(self):
        return f"SeedSequence(entropy={self.entropy!r}, spawn_key={self.spawn_key!r})"


np.random.bit_generator.ISpawnableSeedSequence.register(_Seeded)
