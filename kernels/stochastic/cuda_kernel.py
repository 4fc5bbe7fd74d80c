"""The CUDA kernel of `stochastic.cuda`: one thread per trajectory, its work in local arrays.

Imported only where a device run starts: importing it imports numba.cuda, which reads
NUMBA_ENABLE_CUDASIM (numba-cuda's simulator) once, at that import. `cuda` is a module global
so that the simulator can swap in its own module when it runs the kernel as Python.
"""

import functools

import numpy as np
from numba import cuda

from . import device_steps


@functools.cache
def device_kernel(n: int, d: int):
    """The kernel for n tokens in d dimensions (local arrays' shapes are compile-time)."""
    parts = device_steps.build(lambda f: cuda.jit(f, device=True))
    trajectory = parts.trajectory
    size = max(n * d, d * d) + 1

    def kernel(att, noise, law, k0, k1, trajs, beta, s, sqrt_h, layers, ckpt, times, eps,
               window, omin, omax, cls, ncl, thit, nonfin):
        r = cuda.grid(1)
        if r < trajs.shape[0]:
            x = cuda.local.array((n, d), np.float64)
            a = cuda.local.array((n, d), np.float64)
            direction = cuda.local.array((n, d), np.float64)
            g = cuda.local.array((n, n), np.float64)
            rf = cuda.local.array((n, n), np.float64)
            for i in range(n):
                for j in range(n):
                    rf[i, j] = 0.0
            buf = cuda.local.array(size, np.float64)
            logscale = cuda.local.array(n, np.float64)
            parent = cuda.local.array(n, np.int64)
            trajectory(x, a, direction, g, rf, buf, logscale, parent, n, d, att, noise, law, k0,
                       k1, trajs[r], beta, s, sqrt_h, layers, ckpt, times, eps, window, omin,
                       omax, cls, ncl, thit, nonfin, r)

    return cuda.jit(kernel)
