"""The CUDA kernels of `stochastic.cuda`: one thread per trajectory, its work in local arrays
(`device_kernel`), or one warp per trajectory (`warp_kernel`): a block of 32 threads, lane i
owning tokens i, i + 32, ... in the steps that run per token, the serial ones (the Householder R,
the outcomes) on lane 0 while the others wait at a barrier, the work arrays in global memory.

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


def _import_cuda():
    global cuda
    if cuda is None:
        from numba import cuda as numba_cuda

        cuda = numba_cuda


@functools.cache
def _device_parts():
    _import_cuda()
    return device_steps.build(lambda f: cuda.jit(f, device=True))


def lanes_sync():
    cuda.syncthreads()  # a block is one warp: the warp's barrier


def lanes_all(ok):
    return cuda.syncthreads_and(1 if ok else 0) != 0


@functools.cache
def _warp_parts():
    _import_cuda()

    def jit(f):
        return cuda.jit(f, device=True)
    return device_steps.build(jit, jit(lanes_sync), jit(lanes_all))


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
                       energies, states, r, 0, 1)

    return cuda.jit(kernel)


WARP = 32  # threads per block of `warp_kernel`: one trajectory each


@functools.cache
def warp_kernel():
    """One block of WARP threads per trajectory r = blockIdx.x, its work arrays the r-th of
    the global arrays passed last (x, a, direction, g, rf (zeros), buf, logscale, parent)."""
    trajectory = _warp_parts().trajectory

    def kernel(n, d, att, noise, law, k0, k1, trajs, beta, s, h, sqrt_h, layers, ckpt, times, eps,
               window, omin, omax, cls, ncl, thit, nonfin, hist, gram, margin, towards, cons,
               cons_abs, energies, states, xs, avs, dirs, gs, rfs, bufs, logs, parents):
        r = cuda.blockIdx.x
        if r < trajs.shape[0]:
            trajectory(xs[r], avs[r], dirs[r], gs[r], rfs[r], bufs[r], logs[r], parents[r], n, d,
                       att, noise, law, k0, k1, trajs[r], beta, s, h, sqrt_h, layers, ckpt, times,
                       eps, window, omin, omax, cls, ncl, thit, nonfin, hist, gram, margin,
                       towards, cons, cons_abs, energies, states, r, cuda.threadIdx.x, WARP)

    return cuda.jit(kernel)
