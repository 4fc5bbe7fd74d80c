"""Speed of the sphere flow's general (not symmetric) paths, on one core: random Q, K, V drawn per
trajectory (one `trajectory` call each, as geshkovski2023-fig5) and fixed two-head weights (blocks
of trajectories per call). `bench_sphere_flow.py` measures the symmetric path (Q = K = V = I).

Unit: particle-steps per second of process CPU time (8 trajectories x 300 steps x n tokens), best
of 3 after a compiling warm-up. Before / after a change: run it with PYTHONPATH pointing at each
copy of the package (e.g. one extracted with `git archive`).

    python benchmarks/bench_sphere_general.py
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one core, set before numpy / numba load

import time  # noqa: E402

import numpy as np  # noqa: E402

import tokensweep  # noqa: E402
from tokensweep.kernels.sphere.flow import simulate_sphere_flow  # noqa: E402

CASES = {
    "random Q, K, V ginibre, n 32, d 32": dict(n=32, d=32, qk="ginibre", value="ginibre"),
    "fixed, 2 heads, n 32, d 32": dict(n=32, d=32, heads=2),
    "random Q, K ginibre, V wishart, n 32, d 128": dict(n=32, d=128, qk="ginibre", value="wishart"),
}


def main():
    print(f"package: {tokensweep.__file__}; load average {os.getloadavg()[0]:.2f}")
    for name, kw in CASES.items():
        args = dict(beta=1.0, T=30.0, layers=300, checkpoint_layers=np.array([300]), **kw)
        simulate_sphere_flow([np.random.default_rng(0)], **{**args, "layers": 2, "T": 0.2,
                                                            "checkpoint_layers": np.array([2])})
        best = np.inf
        for _ in range(3):
            rngs = [np.random.default_rng(s) for s in range(8)]
            t0 = time.process_time()
            simulate_sphere_flow(rngs, **args)
            best = min(best, time.process_time() - t0)
        print(f"{name}: {8 * 300 * kw['n'] / best:.3e} particle-steps/s")


if __name__ == "__main__":
    main()
