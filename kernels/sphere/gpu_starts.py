"""The sphere flow's starts drawn on the device (issue 26 item 2): Philox normals in PyTorch.

Each trajectory's Generator gives two 32-bit words, its Philox key (`generator_keys`); its n*d
start normals are `lowlevel.philox`'s normals of that key, trajectory word 0, blocks 0, 1, ...
(two normals per block, row-major), computed on the device by integer tensor arithmetic, and
shaped there as `ensembles.shape_start` shapes them (rows normalised; hemisphere: |x_i1|;
equiangular: orthonormal rows, Gram-Schmidt's signs). So only 8 bytes per trajectory cross the
bus, and a trajectory's start depends on its Generator alone, not on its batch or the device.
These are not the numbers the CPU draws from the same Generators (numpy's PCG64 normals): a
spec's `device` is part of what it computes (docs/models.md 2.10). `philox.normals_numpy` of the
same key is the reference the tests compare with (the words bit for bit, the normals to rounding
of log / cos / sin).

PyTorch is imported inside the functions, as in `sphere.gpu`.
"""

import math

import numpy as np

from ..ensembles import EQUIANGULAR, HEMISPHERE, shape_start
from ..lowlevel.philox import (
    INV53,
    PHILOX_M0,
    PHILOX_M1,
    PHILOX_W0,
    PHILOX_W1,
    ROUNDS,
    normals_numpy,
)

M32 = 0xFFFFFFFF
M16 = 0xFFFF
CHUNK_NORMALS = 1 << 24  # normals drawn per pass (bounds the int64 temporaries: ~1 GB at most)


def generator_keys(rngs, r0, r1):
    """(r1 - r0, 2) int64: trajectory r's Philox key, two 32-bit words drawn from rngs[r]."""
    return np.array([rngs[r].integers(0, 1 << 32, size=2, dtype=np.uint64) for r in range(r0, r1)],
                    dtype=np.int64).reshape(r1 - r0, 2)


def starts_on_host(rngs, n, d, init):
    """(ntraj, n, d) float64: the starts `starts` gives on the device, computed on the host
    (`philox.normals_numpy`, `ensembles.shape_start`; rounding apart), to start the CPU kernel
    where a device run starts (its x0). Draws the keys from rngs, as a device run does."""
    keys = generator_keys(rngs, 0, len(rngs))
    x0 = np.stack([normals_numpy(key, 0, 0, n * d).reshape(n, d) for key in keys])
    for x in x0:
        if not shape_start(init, x):
            raise ValueError("a degenerate start (a zero row, dependent equiangular rows)")
    return x0


def _mulhilo(a, m):
    """(hi, lo) 32-bit words of a * m for int64 tensors a < 2^32 and a Python int m < 2^32, in
    int64 without overflow: a = a1 2^16 + a0, so a m = (a1 m) 2^16 + a0 m with both < 2^48."""
    low = (a & M16) * m
    high = (a >> 16) * m
    return (high + (low >> 16)) >> 16, (((high & M16) << 16) + low) & M32


def philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on int64 tensors of 32-bit words (broadcasting); `philox.philox4x32`'s."""
    m0, m1, w0, w1 = int(PHILOX_M0), int(PHILOX_M1), int(PHILOX_W0), int(PHILOX_W1)
    for _ in range(ROUNDS):
        hi0, lo0 = _mulhilo(c0, m0)
        hi1, lo1 = _mulhilo(c2, m1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + w0) & M32
        k1 = (k1 + w1) & M32
    return c0, c1, c2, c3


def _words(keys, count, first):
    """The Philox words (each (B, blocks) int64) of the blocks first, first + 1, ... holding
    `count` numbers (two per block) of each trajectory's key (trajectory word 0)."""
    import torch

    blocks = (count + 1) // 2
    index = (torch.arange(blocks, dtype=torch.int64, device=keys.device) + first)[None, :]
    zero = torch.zeros((), dtype=torch.int64, device=keys.device)
    return philox(index & M32, index >> 32, zero, zero, keys[:, :1], keys[:, 1:])


def _doubles(hi, lo, plus=0):
    """(hi >> 5) 2^26 + (lo >> 6) (+ plus) times 2^-53: a double from two words (exact)."""
    import torch

    return ((hi >> 5) * (1 << 26) + (lo >> 6) + plus).to(torch.float64) * INV53


def normals(keys, count, first=0):
    """(B, count) float64 on keys' device: `philox.normals_numpy(keys[b], 0, first, count)`;
    first: an int or a 0-d int64 tensor on that device (read when the kernels run: a CUDA
    graph that captured this call draws from its current value)."""
    import torch

    w0, w1, w2, w3 = _words(keys, count, first)
    rad = torch.sqrt(-2.0 * torch.log(_doubles(w0, w1, 1)))  # u1 in (0, 1]
    ang = (2.0 * math.pi) * _doubles(w2, w3)
    pairs = torch.stack([rad * torch.cos(ang), rad * torch.sin(ang)], dim=2)
    return pairs.flatten(1)[:, :count]


def uniforms(keys, count, first=0):
    """(B, count) float64 in [0, 1): `philox.uniforms_numpy(keys[b], 0, first, count)`."""
    import torch

    w0, w1, w2, w3 = _words(keys, count, first)
    return torch.stack([_doubles(w0, w1), _doubles(w2, w3)], dim=2).flatten(1)[:, :count]


def starts(keys, n, d, init):
    """(x (B, n, d) float64, ok (B,) bool) on keys' device: trajectory b's start from keys[b] (a
    (B, 2) int64 tensor), shaped as `ensembles.shape_start` (`ok` False where degenerate: a zero
    row, dependent equiangular rows)."""
    import torch

    rows = max(1, CHUNK_NORMALS // (n * d))
    z = torch.cat([normals(keys[b:b + rows], n * d) for b in range(0, keys.shape[0], rows)])
    return shape(z.view(-1, n, d), init)


def shape(z, init):
    """`ensembles.shape_start` of normals z (B, n, d) float64 (for init != GIVEN), batched."""
    import torch

    if init == EQUIANGULAR:  # Q of z^T = QR with R's diagonal made positive: Gram-Schmidt's rows
        q, r = torch.linalg.qr(z.transpose(1, 2))
        diag = torch.diagonal(r, dim1=1, dim2=2)
        x = (q * torch.sign(diag)[:, None, :]).transpose(1, 2).contiguous()
        return x, (diag != 0).all(1)
    norm = torch.linalg.vector_norm(z, dim=2, keepdim=True)
    x = z / norm
    if init == HEMISPHERE:
        x[:, :, 0] = x[:, :, 0].abs()
    return x, (norm[:, :, 0] > 0).all(1)
