"""Speed of the deterministic SA retraction-Euler kernel against batched NumPy, on one core.

The NumPy baseline is the papers' approach: B trajectories as a (B, n, d) tensor, logits by batched
matmul, softmax with the row max subtracted, one vectorised retraction step for all B at once.
The kernel is `simulate_sphere_flow` (Q = K = V = I, SA, Euler, one checkpoint at the end, so the
outcome reductions cost almost nothing), JIT warmed up.
Unit: particle-steps per second (one token advanced by one step = 1).

Each size is measured REPEATS times, kernel and NumPy interleaved, about TARGET_SECONDS each; the
table gives the medians and the ratio of the medians (min and max of the per-repeat ratios beside
it), with the load average at the start, since the machine may be shared.

    python benchmarks/bench_sphere_flow.py [--repeats R] [--seconds S]
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one core for both sides, set before numpy / numba load

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from tokensweep.kernels.sphere_flow import simulate_sphere_flow  # noqa: E402

BETA = 1.0
H = 0.1
SIZES = [(32, 2), (32, 32), (64, 16), (256, 32)]
TARGET_SECONDS = 1.0  # per measurement
REPEATS = 5


def numpy_batched(x, steps, beta=BETA, h=H):
    """Retraction Euler for SA with Q = K = V = I on a batch x (B, n, d), in place."""
    for _ in range(steps):
        logits = beta * np.matmul(x, x.transpose(0, 2, 1))
        logits -= logits.max(axis=2, keepdims=True)
        w = np.exp(logits)
        w /= w.sum(axis=2, keepdims=True)
        a = np.matmul(w, x)
        a -= np.sum(x * a, axis=2, keepdims=True) * x
        x += h * a
        x /= np.linalg.norm(x, axis=2, keepdims=True)
    return x


def kernel_run(n, d, ntraj, layers):
    rngs = [np.random.default_rng(i) for i in range(ntraj)]
    return simulate_sphere_flow(rngs, n=n, d=d, beta=BETA, T=H * layers, layers=layers,
                                checkpoint_layers=np.array([layers]))


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def kernel_size(n, d, seconds):
    layers = 50
    probe = timed(lambda: kernel_run(n, d, 2, layers)) / (2 * n * layers)
    return max(2, int(seconds / (probe * n * layers))), layers


def measure_kernel(n, d, ntraj, layers):
    return ntraj * n * layers / timed(lambda: kernel_run(n, d, ntraj, layers))


def numpy_size(n, d, seconds):
    batch = max(1, min(256, int(2**22 // (n * n))))  # keep the (B, n, n) logits near 32 MB
    x0 = np.random.default_rng(0).standard_normal((batch, n, d))
    x0 /= np.linalg.norm(x0, axis=2, keepdims=True)
    probe = timed(lambda: numpy_batched(x0.copy(), 5)) / (batch * n * 5)
    return x0, max(5, int(seconds / (probe * batch * n)))


def measure_numpy(x0, steps):
    batch, n, _ = x0.shape
    return batch * n * steps / timed(lambda: numpy_batched(x0.copy(), steps))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=REPEATS)
    ap.add_argument("--seconds", type=float, default=TARGET_SECONDS, help="per measurement")
    args = ap.parse_args()
    kernel_run(4, 2, 1, 2)  # JIT warm-up (or load from the cache)
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"SA, Q = K = V = I, retraction Euler, beta = {BETA}, h = {H}, one core; "
          f"load average {load} on {os.cpu_count()} CPUs; median of {args.repeats}")
    print(f"{'n':>5} {'d':>4} {'kernel p-steps/s':>17} {'(traj x layers)':>16} "
          f"{'numpy p-steps/s':>16} {'(B x steps)':>12} {'ratio':>6} {'(min..max)':>12}")
    for n, d in SIZES:
        ntraj, layers = kernel_size(n, d, args.seconds)
        x0, steps = numpy_size(n, d, args.seconds)
        k_rates, np_rates = [], []
        for _ in range(args.repeats):
            k_rates.append(measure_kernel(n, d, ntraj, layers))
            np_rates.append(measure_numpy(x0, steps))
        k_rate, np_rate = statistics.median(k_rates), statistics.median(np_rates)
        ratios = [a / b for a, b in zip(k_rates, np_rates)]
        print(f"{n:5d} {d:4d} {k_rate:17.3e} {f'{ntraj} x {layers}':>16} "
              f"{np_rate:16.3e} {f'{x0.shape[0]} x {steps}':>12} {k_rate / np_rate:6.2f} "
              f"{f'{min(ratios):.2f}..{max(ratios):.2f}':>12}")


if __name__ == "__main__":
    main()
