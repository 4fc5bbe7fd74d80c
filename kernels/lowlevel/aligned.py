"""Arrays on 64-byte boundaries from numba code: one 512-bit vector per cache line.

numba's `np.empty` aligns to 32 bytes, so an array's rows of 8 float64 start on a 64-byte cache
line or straddle two, by chance of the allocator, and every 512-bit load and store of a straddling
row touches two lines. A kernel whose vectors start at multiples of 8 entries (`sphere.symmetric`'s
blocks of 8 rows and columns) then runs ~10 % faster or slower from one process to the next.
"""

import numpy as np
from numba import njit

from .. import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)

LINE = 64  # bytes


@njit(nogil=True, cache=True, inline="always")
def empty_lines(rows, cols, proto):
    """An uninitialised C-contiguous (rows, cols) array of proto's dtype whose first entry starts a
    64-byte line (each row too, where cols * itemsize is a multiple of 64)."""
    size = rows * cols
    buf = np.empty(size + LINE // proto.itemsize, proto.dtype)
    skip = (LINE - buf.ctypes.data % LINE) % LINE // buf.itemsize
    return buf[skip:skip + size].reshape((rows, cols))
