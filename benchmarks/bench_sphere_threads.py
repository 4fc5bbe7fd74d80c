"""Threads inside one partition of the sphere flow: `simulate_sphere_flow(..., threads=k)`.

One partition as a sweep runs it: SA, Q = K = V = I, Euler, beta = 1, n = d = 32, 2048
trajectories, T = 30 at h = 0.1 (300 layers), one checkpoint at the end. Wall time of 1 and of
2 threads (or --threads), measured in turn, best of R; the outputs of every run are checked to
be bit-identical to the one-thread run. The machine may be shared: the load average is printed
(with k threads on k cores, the speed-up is bounded by the cores the other processes leave).

    python benchmarks/bench_sphere_threads.py [--repeats R] [--ntraj N] [--threads 1,2]
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # as on a sweep's worker

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from tokensweep.kernels.sphere.flow import simulate_sphere_flow  # noqa: E402


def run(ntraj, threads, n=32, d=32, layers=300):
    rngs = [np.random.default_rng([7, i]) for i in range(ntraj)]
    t0 = time.perf_counter()
    out = simulate_sphere_flow(rngs, n=n, d=d, beta=1.0, T=0.1 * layers, layers=layers,
                               checkpoint_layers=[layers], threads=threads)
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ntraj", type=int, default=2048)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    counts = [int(v) for v in args.threads.split(",")]
    run(4, max(counts))  # compile (or load from the cache)
    load0 = os.getloadavg()
    best, ref = {}, None
    for _ in range(args.repeats):
        for k in counts:
            wall, out = run(args.ntraj, k)
            best[k] = min(best.get(k, np.inf), wall)
            if ref is None:
                ref = out
            assert all(np.array_equal(ref[name], out[name], equal_nan=True) for name in ref), k
    load1 = os.getloadavg()
    print(f"sphere flow, one partition: n = d = 32, {args.ntraj} trajectories, 300 layers, one "
          f"checkpoint; wall time, best of {args.repeats}; load average {load0[0]:.2f} -> "
          f"{load1[0]:.2f} on {os.cpu_count()} CPUs; outputs bit-identical across threads")
    for k in counts:
        rate = args.ntraj * 32 * 300 / best[k]
        print(f"threads {k}: {best[k]:7.3f} s  {rate:.3e} particle-steps/s  speed-up "
              f"{best[counts[0]] / best[k]:.2f}")


if __name__ == "__main__":
    main()
