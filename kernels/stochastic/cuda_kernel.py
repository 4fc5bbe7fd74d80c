"""The CUDA kernel of `stochastic.cuda`: one thread per trajectory, its work in local arrays.

numba.cuda reads NUMBA_ENABLE_CUDASIM (numba-cuda's simulator) once, at its first import, so
this module imports it only when a kernel is first built (a walk over the package's modules
does not): `cuda` is then a module global, so that the simulator can swap in its own module
when it runs the kernel as Python.
"""

import functools

import numpy as np

from . import device_steps

cuda = None  # numba.cuda, imported by the first `device_kernel` call (module docstring)


@functools.cache
def device_kernel(n: int, d: int):
    """The kernel for n tokens in d dimensions (local arrays' shapes are compile-time)."""
    global cuda
    if cuda is None:
        from numba import cuda as numba_cuda

        cuda = numba_cuda
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
