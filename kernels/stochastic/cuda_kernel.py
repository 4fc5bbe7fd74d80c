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


def capacity(value: int, smallest: int) -> int:
    """The power of two >= value (at least `smallest`): the local arrays' size class."""
    cap = smallest
    while cap < value:
        cap *= 2
    return cap


@functools.cache
def _device_parts():
    global cuda
    if cuda is None:
        from numba import cuda as numba_cuda

        cuda = numba_cuda
    return device_steps.build(lambda f: cuda.jit(f, device=True))


@functools.cache
def device_kernel(ncap: int, dcap: int):
    """The kernel for up to ncap tokens in up to dcap dimensions (local arrays' shapes are
    compile-time; one kernel per size class, `capacity`, serves every n, d within it)."""
    trajectory = _device_parts().trajectory
    size = max(ncap * dcap, dcap * dcap) + 1

    def kernel(n, d, att, noise, law, k0, k1, trajs, beta, s, h, sqrt_h, layers, ckpt, times, eps,
               window, omin, omax, cls, ncl, thit, nonfin, hist, gram, margin, towards, cons,
               cons_abs, energies, states):
        r = cuda.grid(1)
        if r < trajs.shape[0]:
            x = cuda.local.array((ncap, dcap), np.float64)
            a = cuda.local.array((ncap, dcap), np.float64)
            direction = cuda.local.array((ncap, dcap), np.float64)
            g = cuda.local.array((ncap, ncap), np.float64)
            rf = cuda.local.array((ncap, ncap), np.float64)
            for i in range(n):
                for j in range(n):
                    rf[i, j] = 0.0
            buf = cuda.local.array(size, np.float64)
            logscale = cuda.local.array(ncap, np.float64)
            parent = cuda.local.array(ncap, np.int64)
            trajectory(x, a, direction, g, rf, buf, logscale, parent, n, d, att, noise, law, k0,
                       k1, trajs[r], beta, s, h, sqrt_h, layers, ckpt, times, eps, window, omin,
                       omax, cls, ncl, thit, nonfin, hist, gram, margin, towards, cons, cons_abs,
                       energies, states, r)

    return cuda.jit(kernel)
