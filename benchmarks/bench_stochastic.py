"""Throughput of the deep stochastic transformer kernel against plain vectorised numpy.

Run:  python benchmarks/bench_stochastic.py        (about a minute; one core)

Unit: trajectory-steps per second, one trajectory advanced one layer = 1 step. SA attention,
beta = 1, h = 0.01. Columns:

- numpy-lit: plain numpy vectorised over a batch of B = 256 trajectories (B x n x d), drawing the
  literal V_k (B x d x d normals per layer) - the straightforward implementation;
- numpy-gram: the same, with the exact Gaussian shortcut (batched QR of A, B x n x d normals);
- gaussian / literal: the numba kernel's two noise paths (`simulate_stochastic_transformer`),
  one trajectory per call, 2000 layers per trajectory;
- x: kernel / numpy-lit ratio;
- rng-limit: the RNG-bound ceiling of each kernel path, i.e. the rate if a step cost only drawing
  its normals (min(n, d)*d or d*d) with the Generator inside njit.

Threads: NUMBA_NUM_THREADS, OMP/OPENBLAS/MKL_NUM_THREADS are set to 1 before the imports.
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import platform  # noqa: E402
import time  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from tokensweep.kernels.stochastic import simulate_stochastic_transformer  # noqa: E402

BETA, H, B, KERNEL_LAYERS = 1.0, 0.01, 256, 2000
TARGET_S = 0.25  # seconds per timed measurement


def numpy_step_literal(x, rng):
    s = BETA * x @ x.transpose(0, 2, 1)
    w = np.exp(s - s.max(axis=2, keepdims=True))
    a = (w / w.sum(axis=2, keepdims=True)) @ x
    v = rng.standard_normal((x.shape[0], x.shape[2], x.shape[2]))
    y = x + np.sqrt(H) * a @ v.transpose(0, 2, 1)
    return y / np.linalg.norm(y, axis=2, keepdims=True)


def numpy_step_gram(x, rng):
    s = BETA * x @ x.transpose(0, 2, 1)
    w = np.exp(s - s.max(axis=2, keepdims=True))
    a = (w / w.sum(axis=2, keepdims=True)) @ x
    r = np.linalg.qr(a.transpose(0, 2, 1), mode="r")  # (B, min(n, d), n)
    z = rng.standard_normal((x.shape[0], r.shape[1], x.shape[2]))
    y = x + np.sqrt(H) * r.transpose(0, 2, 1) @ z
    return y / np.linalg.norm(y, axis=2, keepdims=True)


def numpy_rate(step, n, d):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, n, d))
    x /= np.linalg.norm(x, axis=2, keepdims=True)
    x = step(x, rng)  # warm-up
    layers, elapsed = 1, 0.0
    while elapsed < TARGET_S:
        layers *= 2
        t0 = time.perf_counter()
        for _ in range(layers):
            x = step(x, rng)
        elapsed = time.perf_counter() - t0
    return B * layers / elapsed


def kernel_rate(noise, n, d):
    def run(ntraj):
        rngs = [np.random.default_rng([1, i]) for i in range(ntraj)]
        t0 = time.perf_counter()
        simulate_stochastic_transformer(rngs, n=n, d=d, beta=BETA, T=H * KERNEL_LAYERS,
                                        layers=KERNEL_LAYERS, checkpoint_layers=[KERNEL_LAYERS],
                                        noise=noise)
        return time.perf_counter() - t0

    run(1)  # JIT warm-up (or cache load)
    ntraj, elapsed = 1, run(1)
    while elapsed < TARGET_S:
        ntraj = max(2 * ntraj, int(ntraj * 1.2 * TARGET_S / max(elapsed, 1e-6)))
        elapsed = run(ntraj)
    return ntraj * KERNEL_LAYERS / elapsed


@njit(nogil=True, cache=True)
def _draw(rng, total, chunk):
    acc = 0.0
    left = total
    while left > 0:
        buf = rng.standard_normal(min(chunk, left))
        acc += buf[0]
        left -= buf.shape[0]
    return acc


def ns_per_normal():
    rng = np.random.default_rng(2)
    _draw(rng, 10_000, 4096)
    t0 = time.perf_counter()
    _draw(rng, 20_000_000, 4096)
    return (time.perf_counter() - t0) / 20_000_000 * 1e9


def main():
    print(f"numpy {np.__version__}, numba {numba.__version__}, {platform.processor() or platform.machine()}, "
          f"NUMBA_NUM_THREADS={os.environ['NUMBA_NUM_THREADS']}, BLAS threads 1, B = {B}")
    t_start = time.perf_counter()
    ns = ns_per_normal()
    print(f"Generator.standard_normal inside njit: {ns:.2f} ns per normal")
    head = (f"{'n':>3} {'d':>3} | {'numpy-lit':>10} {'numpy-gram':>10} | {'gaussian':>10} {'x':>6} "
            f"{'rng-limit':>10} | {'literal':>10} {'x':>6} {'rng-limit':>10}")
    print("trajectory-steps per second (x = ratio to numpy-lit)")
    print(head)
    print("-" * len(head))
    for n in (2, 8):
        for d in (4, 16, 64):
            np_lit = numpy_rate(numpy_step_literal, n, d)
            np_gram = numpy_rate(numpy_step_gram, n, d)
            gauss = kernel_rate("gaussian", n, d)
            lit = kernel_rate("literal", n, d)
            lim_g = 1e9 / (ns * min(n, d) * d)
            lim_l = 1e9 / (ns * d * d)
            print(f"{n:>3} {d:>3} | {np_lit:>10.3g} {np_gram:>10.3g} | {gauss:>10.3g} "
                  f"{gauss / np_lit:>6.1f} {lim_g:>10.3g} | {lit:>10.3g} {lit / np_lit:>6.1f} "
                  f"{lim_l:>10.3g}", flush=True)
    print(f"total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
