"""What the sphere flow's GPU path still hands to the host, in the papers' configurations.

The device computes every checkpoint's outcomes (kernels/sphere/gpu_outcomes.py) but the
hemisphere tests its cheap certificates leave undecided, which the host decides
(kernels/sphere/gpu_host.py). For [GLPR-P] Fig. 3 (SA, Q = K = V = I, d = 2, 32, 1024), Fig. 5
(Ginibre Q, K, V, d = 128) and V = -I (d = 32), at beta 1 and 9 (n = 32, h = 0.1, T = 30,
60 checkpoints), this prints the share of (trajectory, checkpoint) rows sent to the host and the
host's time against the whole call's, on torch's CPU device (no GPU needed: the rows are the
same on a GPU, the host time is this machine's):

    taskset -c 1 python benchmarks/bench_sphere_host_rows.py [TRAJECTORIES]   # default 64
"""

import sys
import time

import numpy as np

CASES = (("Fig. 3, d = 2", dict(d=2)), ("Fig. 3, d = 32", dict(d=32)),
         ("Fig. 3, d = 1024", dict(d=1024)),
         ("Fig. 5, d = 128", dict(d=128, qk="ginibre", value="ginibre")),
         ("V = -I, d = 32", dict(d=32, value="minus_identity")))


def main():
    import torch

    from tokensweep.kernels.sphere import gpu
    from tokensweep.kernels.sphere.flow import simulate_sphere_flow

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    seen = {"rows": 0, "host_s": 0.0}
    host_rows = gpu.host_rows

    def counted(xs, xa, rows, undecided, k0, k1, *rest):  # the host's part, counted and timed
        t0 = time.perf_counter()
        host_rows(xs, xa, rows, undecided, k0, k1, *rest)
        seen["rows"] += int(np.sum(undecided[k0:k1]))
        seen["host_s"] += time.perf_counter() - t0

    gpu.host_rows = counted
    print("| configuration | beta | rows to the host | host s / call s | P(in hemisphere) at T |")
    print("|---|---|---|---|---|")
    for label, kw in CASES:
        for beta in (1.0, 9.0):
            seen.update(rows=0, host_s=0.0)
            rngs = [np.random.default_rng([1, r]) for r in range(count)]
            t0 = time.perf_counter()
            out = simulate_sphere_flow(rngs, n=32, beta=beta, T=30.0, layers=300,
                                       checkpoint_layers=list(range(5, 301, 5)),
                                       device=torch.device("cpu"), **kw)
            wall = time.perf_counter() - t0
            share = seen["rows"] / (count * 60)
            print(f"| {label} | {beta:g} | {100 * share:.1f} % | {seen['host_s']:.3f} / {wall:.2f} | "
                  f"{out['in_hemisphere'][:, -1].mean():.3f} |", flush=True)


if __name__ == "__main__":
    main()
