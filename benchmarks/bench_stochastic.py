"""Throughput of the deep stochastic transformer kernel against plain vectorised numpy.

Run:  python benchmarks/bench_stochastic.py             (about a minute; one core)
      python benchmarks/bench_stochastic.py --profile   (per-component costs, n = 8)
      python benchmarks/bench_stochastic.py --threads   (one partition on 1 and 2 threads)

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

--profile times each part of a general-path layer (n > 2) in isolation, in ns per call, on
states taken along a trajectory (after 1, 500, 1000 and 2000 layers: spread, then collapsed
tokens; mean over the states of the best of 9 rounds, CPU time of this thread so other load on the
machine counts little): the draws (a layer's share of one buffered draw), the overlaps (`gram`),
the attention (weights, exponentials, Ahat), the Householder R, the noise, the step with its
normalisation, and the checkpoint reductions (overlaps + class + cluster count; once per
checkpoint, not per layer). "sum" adds the per-layer parts, "kernel" is the whole kernel per layer.

--threads runs one partition (200 trajectories) with threads=1 and threads=2 (wall time).

Threads: NUMBA_NUM_THREADS, OMP/OPENBLAS/MKL_NUM_THREADS are set to 1 before the imports.
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from tokensweep.kernels import attention as att  # noqa: E402
from tokensweep.kernels.outcomes import allocate_outputs, record_overlaps  # noqa: E402
from tokensweep.kernels.stochastic import (  # noqa: E402
    NORMALS_PER_DRAW,
    simulate_stochastic_states,
    simulate_stochastic_transformer,
)

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


def kernel_rate(noise, n, d, clock=time.perf_counter):
    def run(ntraj):
        rngs = [np.random.default_rng([1, i]) for i in range(ntraj)]
        t0 = clock()
        simulate_stochastic_transformer(rngs, n=n, d=d, beta=BETA, T=H * KERNEL_LAYERS,
                                        layers=KERNEL_LAYERS, checkpoint_layers=[KERNEL_LAYERS],
                                        noise=noise)
        return clock() - t0

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


@njit(nogil=True)
def _p_draw(rng, per_layer, reps):
    batch = max(1, NORMALS_PER_DRAW // per_layer)
    for _ in range(reps):
        rng.standard_normal(batch * per_layer)
    return batch


@njit(nogil=True)
def _p_gram(x, g, reps):
    for _ in range(reps):
        att.gram(x, g)


@njit(nogil=True)
def _p_attention(x, g, ahat, logscale, w, reps):
    for _ in range(reps):
        att.attention(x, g, BETA, att.SA, ahat, logscale, w)


@njit(nogil=True)
def _p_copy(src, dst, reps):
    for _ in range(reps):
        dst[:, :] = src


@njit(nogil=True)
def _p_qr(ahat, a, rfac, reps):
    for _ in range(reps):
        a[:, :] = ahat
        att.householder_r(a, rfac)


@njit(nogil=True)
def _p_values(rfac, buf, direction, reps):
    for _ in range(reps):
        att.gaussian_values(rfac, buf, 0, 1.0, direction)


@njit(nogil=True)
def _p_step(x0, x, logscale, direction, norm2, reps):
    for _ in range(reps):
        x[:, :] = x0
        att.scaled_step(x, np.sqrt(H), logscale, direction, norm2)


@njit(nogil=True)
def _p_checkpoint(x, g, out, reps):
    for _ in range(reps):
        att.gram(x, g)
        record_overlaps(g, 1e-3, out, 0, 0)


def best_ns(jobs, reps, rounds=9):
    """Best-of-rounds thread CPU time per call (ns) of each (function, args), taken in turn."""
    best = [np.inf] * len(jobs)
    for f, a in jobs:
        f(*a, 1)
    for _ in range(rounds):
        for q, (f, a) in enumerate(jobs):
            t0 = time.thread_time()
            f(*a, reps)
            best[q] = min(best[q], time.thread_time() - t0)
    return [b / reps * 1e9 for b in best]


def profile_state(x, rng, reps):
    """ns per call of each component on the state x (n, d)."""
    n, d = x.shape
    r = min(n, d)
    g, w = np.empty((n, n)), np.empty((n, n))
    ahat, logscale = np.empty((n, d)), np.empty(n)
    att.gram(x, g)
    att.attention(x, g, BETA, att.SA, ahat, logscale, w)
    a, rfac = ahat.copy(), np.zeros((r, n))
    buf, direction, norm2 = rng.standard_normal(r * d), np.empty((n, d)), np.empty(n)
    out = allocate_outputs(1, 1)
    t = best_ns([(_p_draw, (rng, r * d)), (_p_gram, (x, g)), (_p_attention, (x, g, ahat, logscale, w)),
                 (_p_qr, (ahat, a, rfac)), (_p_copy, (ahat, a)), (_p_values, (rfac, buf, direction)),
                 (_p_step, (x, x.copy(), logscale, direction, norm2)), (_p_copy, (x, x.copy())),
                 (_p_checkpoint, (x, g, out))], reps)
    per_batch = max(1, NORMALS_PER_DRAW // (r * d))
    return {"draws": t[0] / per_batch, "gram": t[1], "attention": t[2], "R": t[3] - t[4],
            "noise": t[5], "step": t[6] - t[7], "checkpoint": t[8]}


def profile():
    parts = ("draws", "gram", "attention", "R", "noise", "step")
    head = (f"{'n':>3} {'d':>3} | " + " ".join(f"{p:>9}" for p in parts)
            + f" | {'sum':>7} {'kernel':>7} | {'checkpoint':>10}")
    print("general path (gaussian, SA, beta = 1): ns per layer and trajectory, per call")
    print(head)
    print("-" * len(head))
    for d in (4, 16, 64):
        n = 8
        layers = [1, 500, 1000, 2000]
        states, _ = simulate_stochastic_states([np.random.default_rng([3, 0])], n=n, d=d, beta=BETA,
                                               T=H * layers[-1], layers=layers[-1],
                                               checkpoint_layers=layers)
        rows = [profile_state(np.ascontiguousarray(states[0, c]), np.random.default_rng(c),
                              max(200, 400_000 // (n * d))) for c in range(len(layers))]
        mean = {k: np.mean([row[k] for row in rows]) for k in rows[0]}
        kernel = 1e9 / kernel_rate("gaussian", n, d, clock=time.thread_time)
        print(f"{n:>3} {d:>3} | " + " ".join(f"{mean[p]:>9.0f}" for p in parts)
              + f" | {sum(mean[p] for p in parts):>7.0f} {kernel:>7.0f} | {mean['checkpoint']:>10.0f}",
              flush=True)


def threads():
    """One partition (200 trajectories) with threads = 1 and 2, wall time, alternating."""
    print(f"one partition, 200 trajectories, wall time (best of 3), {os.cpu_count()} CPUs")
    for n, d, layers in ((2, 4, 10000), (8, 16, 2000)):
        kw = dict(n=n, d=d, beta=BETA, T=H * layers, layers=layers, checkpoint_layers=[layers])
        simulate_stochastic_transformer([np.random.default_rng(0)], threads=2, **kw)  # warm-up
        best = {1: np.inf, 2: np.inf}
        for _ in range(3):
            for t in (1, 2):
                rngs = [np.random.default_rng([5, i]) for i in range(200)]
                t0 = time.perf_counter()
                simulate_stochastic_transformer(rngs, threads=t, **kw)
                best[t] = min(best[t], time.perf_counter() - t0)
        print(f"n = {n}, d = {d:>2}, {layers} layers: threads=1 {best[1]:.2f} s, threads=2 "
              f"{best[2]:.2f} s, speed-up {best[1] / best[2]:.2f}", flush=True)


def main():
    if "--profile" in sys.argv:
        return profile()
    if "--threads" in sys.argv:
        return threads()
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
