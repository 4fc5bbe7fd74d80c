"""Running the trajectories of a partition in blocks, in order or on threads.

A kernel's entry point splits its trajectories into blocks [r0, r1) and hands each block to a
numba function compiled with nogil=True. Trajectories are independent (each has its own
Generator, its own rows of the outputs), so the split and the number of threads never change a
result: `run_blocks` may run the blocks on a thread pool.
"""

import functools

import numpy as np


def start_normals(rngs, r0, r1, n, d):
    """(r1 - r0, n, d) standard normals, trajectory r's from rngs[r] (the numbers `draw_start`
    would draw)."""
    z = np.empty((r1 - r0, n, d))
    for b in range(r1 - r0):
        rngs[r0 + b].standard_normal(out=z[b])
    return z


def block_size(ntraj, n, d, threads, fixed):
    """Trajectories per call: the starts' normals of a block fill ~2 MB; with threads, at least
    4 blocks per thread (any split gives the same results: trajectories are independent)."""
    block = max(1, (1 << 18) // (n * d)) if fixed else 16
    if threads > 1:
        block = min(block, max(1, -(-ntraj // (4 * threads))))
    return block


@functools.lru_cache(maxsize=1)
def _blas_threads_local():
    """openblas_set_num_threads_local of the OpenBLAS that scipy ships (numba's np.dot runs on
    it), or None where it cannot be found."""
    import ctypes
    import glob
    import os

    import scipy

    root = os.path.dirname(scipy.__file__)
    for pattern in ("../scipy.libs/libscipy_openblas*", ".dylibs/libscipy_openblas*"):
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            try:
                return ctypes.CDLL(path).openblas_set_num_threads_local
            except (OSError, AttributeError):
                continue
    return None


def _one_blas_thread():
    setter = _blas_threads_local()
    if setter is not None:
        setter(1)


def run_blocks(ntraj, block, threads, work):
    """work(r0, r1) for the blocks [r0, r1) of range(ntraj), in order, or on a pool of `threads`
    threads (the kernels release the GIL). Each pool thread first sets its own OpenBLAS thread
    count to 1 (openblas_set_num_threads_local), so threads do not oversubscribe the cores; where
    that OpenBLAS cannot be found, set OPENBLAS_NUM_THREADS=1 (the workers of a sweep do)."""
    bounds = [(r0, min(r0 + block, ntraj)) for r0 in range(0, ntraj, block)]
    if threads == 1 or len(bounds) == 1:
        for r0, r1 in bounds:
            work(r0, r1)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(threads, len(bounds)), initializer=_one_blas_thread) as pool:
        for done in [pool.submit(work, r0, r1) for r0, r1 in bounds]:
            done.result()
