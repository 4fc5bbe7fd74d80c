"""Counter-based random numbers for the device kernels: Philox4x32-10 and Box-Muller normals.

Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11; the Random123 library) maps a 128-bit counter
(c0, c1, c2, c3) and a 64-bit key (k0, k1) to four 32-bit words; a trajectory's numbers are a pure
function of (key, counter), so no generator state is stored or passed between threads and a
trajectory's stream does not depend on the batch it runs in, the launch or the GPU. The device
kernels (`kernels/stochastic/cuda.py`) use:

    key     = (k0, k1): `device_key(seed, cell)`, SeedSequence(seed, spawn_key=(*cell_key, DEVICE_TAG))
    counter = (block lo32, block hi32, trajectory lo32, trajectory hi32)

and one block (one Philox call) gives two doubles from 53-bit integers, a = w0 >> 5, b = w1 >> 6
(u = (a 2^26 + b) 2^-53 in [0, 1)) and c, e from w2, w3 likewise:

    normals:  z0 = sqrt(-2 log u1) cos(2 pi u2),  z1 = sqrt(-2 log u1) sin(2 pi u2),
              u1 = (a 2^26 + b + 1) 2^-53 in (0, 1] (never log 0), u2 = (c 2^26 + e) 2^-53;
    uniforms: (a 2^26 + b) 2^-53 and (c 2^26 + e) 2^-53, in [0, 1).

The functions below are plain Python over uint64 words (each < 2^32) and float64 scalars, so the
same source is compiled by `build(jit)` for the device (numba.cuda.jit(device=True)) and for the
CPU (numba.njit): numba-cuda's simulator runs the device build as Python. `philox_numpy`,
`normals_numpy`, `uniforms_numpy` are an independent numpy implementation (whole arrays of
counters at once), the reference the tests compare the builds with; the Random123 known-answer
vectors check Philox itself. Numbers from the device are not those of the CPU kernels' PCG64
streams: a spec's `device` is part of what it computes (docs/models.md section 4.6).
"""

import math
from types import SimpleNamespace

import numpy as np

M32 = np.uint64(0xFFFFFFFF)
S32 = np.uint64(32)
S5 = np.uint64(5)
S6 = np.uint64(6)
TWO26 = np.uint64(1 << 26)
ONE = np.uint64(1)
PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = np.uint64(0x9E3779B9)
PHILOX_W1 = np.uint64(0xBB67AE85)
INV53 = 2.0 ** -53
TWO_PI = 2.0 * math.pi
ROUNDS = 10
DEVICE_TAG = 0xC0DA  # the last spawn-key word of the device's key: a stream apart from the CPU's


def philox4x32(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of counter (c0..c3) under key (k0, k1); uint64 words < 2^32 in and out."""
    for _ in range(ROUNDS):
        p0 = PHILOX_M0 * c0
        p1 = PHILOX_M1 * c2
        c0, c1, c2, c3 = ((p1 >> S32) ^ c1 ^ k0, p1 & M32, (p0 >> S32) ^ c3 ^ k1, p0 & M32)
        k0 = (k0 + PHILOX_W0) & M32
        k1 = (k1 + PHILOX_W1) & M32
    return c0, c1, c2, c3


def make_block(philox):
    def block(k0, k1, traj, index):
        """The four words of block `index` (int64 >= 0) of trajectory `traj` (int64 >= 0)."""
        b = np.uint64(index)
        t = np.uint64(traj)
        return philox(b & M32, b >> S32, t & M32, t >> S32, np.uint64(k0), np.uint64(k1))
    return block


def make_normal_pair(block):
    def normal_pair(k0, k1, traj, index):
        """Two standard normals (Box-Muller) from block `index` of trajectory `traj`."""
        w0, w1, w2, w3 = block(k0, k1, traj, index)
        u1 = ((w0 >> S5) * TWO26 + (w1 >> S6) + ONE) * INV53
        u2 = ((w2 >> S5) * TWO26 + (w3 >> S6)) * INV53
        rad = math.sqrt(-2.0 * math.log(u1))
        ang = TWO_PI * u2
        return rad * math.cos(ang), rad * math.sin(ang)
    return normal_pair


def make_uniform_pair(block):
    def uniform_pair(k0, k1, traj, index):
        """Two uniforms on [0, 1) from block `index` of trajectory `traj`."""
        w0, w1, w2, w3 = block(k0, k1, traj, index)
        return ((w0 >> S5) * TWO26 + (w1 >> S6)) * INV53, ((w2 >> S5) * TWO26 + (w3 >> S6)) * INV53
    return uniform_pair


def make_fill(normal_pair, uniform_pair):
    def fill(buf, count, law, k0, k1, traj, first, lane, width):
        """buf[:count] <- the entries of blocks first, first + 1, ... (two per block; an odd
        count drops the last block's second). law 0: normals; 1: +-1 (u < 1/2: +1); 2:
        sqrt(3) (2u - 1). Returns the next unused block. lane of width: this lane fills the
        blocks first + p, p = lane, lane + width, ... (one caller: 0 of 1)."""
        blocks = (count + 1) // 2
        root3 = math.sqrt(3.0)
        for p in range(lane, blocks, width):
            if law == 0:
                a, b = normal_pair(k0, k1, traj, first + p)
            else:
                a, b = uniform_pair(k0, k1, traj, first + p)
                if law == 1:
                    a = 1.0 if a < 0.5 else -1.0
                    b = 1.0 if b < 0.5 else -1.0
                else:
                    a = root3 * (2.0 * a - 1.0)
                    b = root3 * (2.0 * b - 1.0)
            buf[2 * p] = a
            if 2 * p + 1 < count:
                buf[2 * p + 1] = b
        return first + blocks
    return fill


def build(jit):
    """The generator compiled by `jit` (numba.njit or numba.cuda.jit(device=True)): a namespace
    with philox, block, normal_pair, uniform_pair and fill."""
    philox = jit(philox4x32)
    block = jit(make_block(philox))
    normal_pair = jit(make_normal_pair(block))
    uniform_pair = jit(make_uniform_pair(block))
    fill = jit(make_fill(normal_pair, uniform_pair))
    return SimpleNamespace(philox=philox, block=block, normal_pair=normal_pair,
                           uniform_pair=uniform_pair, fill=fill)


def blocks_for(count):
    """Blocks that `fill` uses for `count` entries."""
    return (count + 1) // 2


def device_key(seed, cell_key):
    """The Philox key (k0, k1) of one grid cell: SeedSequence(seed, spawn_key=(*cell_key,
    DEVICE_TAG)).generate_state(2) (cell_key: `pipeline.seeds.cell_key`)."""
    words = np.random.SeedSequence(int(seed), spawn_key=(*cell_key, DEVICE_TAG)).generate_state(2)
    return int(words[0]), int(words[1])


# --- the numpy reference: whole arrays of blocks at once, written apart from the source above ---

def philox_numpy(counter, key):
    """Philox4x32-10 of counters (m, 4) under key (2,), uint32 arrays; returns (m, 4) uint32."""
    c = np.asarray(counter, np.uint64).T.copy()
    k = np.asarray(key, np.uint64).copy()
    mults = np.array([0xD2511F53, 0xCD9E8D57], np.uint64)
    bumps = np.array([0x9E3779B9, 0xBB67AE85], np.uint64)
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(ROUNDS):
        prod0, prod1 = mults[0] * c[0], mults[1] * c[2]
        c = np.stack([(prod1 >> np.uint64(32)) ^ c[1] ^ k[0], prod1 & mask,
                      (prod0 >> np.uint64(32)) ^ c[3] ^ k[1], prod0 & mask])
        k = (k + bumps) & mask
    return c.T.astype(np.uint32)


def _words_numpy(key, traj, first, nblocks):
    index = np.arange(first, first + nblocks, dtype=np.uint64)
    counter = np.stack([index & np.uint64(0xFFFFFFFF), index >> np.uint64(32),
                        np.full(nblocks, traj & 0xFFFFFFFF, np.uint64),
                        np.full(nblocks, traj >> 32, np.uint64)], axis=1)
    return philox_numpy(counter, key).astype(np.uint64)


def _doubles_numpy(w, i, j, plus):
    return ((w[:, i] >> np.uint64(5)) * np.uint64(1 << 26) + (w[:, j] >> np.uint64(6)) + np.uint64(plus)) * INV53


def normals_numpy(key, traj, first, count):
    """`fill`'s normals (law 0) for trajectory traj from block `first` on, in numpy."""
    w = _words_numpy(key, traj, first, blocks_for(count))
    rad = np.sqrt(-2.0 * np.log(_doubles_numpy(w, 0, 1, 1)))
    ang = TWO_PI * _doubles_numpy(w, 2, 3, 0)
    return np.stack([rad * np.cos(ang), rad * np.sin(ang)], axis=1).ravel()[:count]


def uniforms_numpy(key, traj, first, count):
    """`fill`'s uniforms (before a law maps them) from block `first` on, in numpy."""
    w = _words_numpy(key, traj, first, blocks_for(count))
    return np.stack([_doubles_numpy(w, 0, 1, 0), _doubles_numpy(w, 2, 3, 0)], axis=1).ravel()[:count]
