"""[GLPR-P] Fig. 3 at the paper's size: what it costs, and a part of it run here.

The paper: SA, Q = K = V = I, n = 32, d in {2, 8, 32, 128, 512, 1024}, 2048 draws per cell,
beta in linspace(0.1, 9, 90), retraction Euler h = 0.1 to T = 30 (300 steps). The sizes and the
checkpoints are those of `tokensweep run geshkovski2023-fig3 --scale paper` (the catalog spec's
paper scale: frac_close, cluster count, energy, hemisphere test at every one of the 300 layers;
`--checkpoints 60`: every 0.5, as at the small scale). 90 x 2048 = 184,320 trajectories per d,
1.1e6 in all.

1. Per d, the kernel (`simulate_sphere_flow`, one thread) integrates `--probe` trajectories at
   beta = 0.1, 4.5 and 9 with the paper's settings; CPU seconds per trajectory (the process's
   CPU time: robust to the other processes of a loaded machine), averaged over the three betas.
   d > n runs in the span of the start (`sphere.symmetric`), so d = 128 .. 1024 cost about what
   d = 32 costs plus the start's QR.
2. Projection: the full grid's CPU seconds per d (184,320 trajectories x that cost), and the wall
   time on 2 cores and on a 64-core node (trajectories are independent: CPU / cores; the
   fixed start-up of a sweep, seconds, is left out).
3. `--run 2,8`: those d at full size (every beta of `--betas`, default all 90, x 2048 draws),
   cell by cell, each cell's trajectories on `--threads` numba threads (`run_blocks`): the wall
   time and the CPU time, beside the projection for the same part.
`--write-spec PATH`: the paper-scale spec as YAML (the catalog's fig3 spec at its paper scale,
with `--checkpoints`), for `tokensweep run PATH`.

    python benchmarks/bench_fig3_paper.py [--probe 32] [--checkpoints 300] [--run 2,8]
        [--betas 90] [--threads 2]
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from tokensweep.kernels.sphere.flow import simulate_sphere_flow  # noqa: E402
from tokensweep.pipeline.spec.load import load_sweep, parse_sweep, read_spec  # noqa: E402

CATALOG = Path(__file__).resolve().parent.parent / "catalog" / "geshkovski2023-fig3.yaml"
PAPER = load_sweep(CATALOG, "paper")
N = PAPER.axes["n"][0]
DIMS = tuple(PAPER.axes["d"])
BETAS = np.asarray(PAPER.axes["beta"])
DRAWS = PAPER.trajectories
T, LAYERS = PAPER.time.T, PAPER.time.layers
PROBE_BETAS = (0.1, 4.5, 9.0)


def paper_spec(checkpoints):
    """The catalog's fig3 spec at its paper scale, with `checkpoints` (validated)."""
    data = read_spec(CATALOG, "paper")
    data.update(store="results/geshkovski2023-fig3-paper.zarr",
                time={**data["time"], "checkpoints": checkpoints})
    parse_sweep(data)
    return data


def run_cell(d, beta, ntraj, seed, checkpoints, threads=1):
    """One cell's trajectories (the paper's settings, `checkpoints` equally spaced); returns
    (CPU s, wall s)."""
    rngs = [np.random.default_rng([seed, i]) for i in range(ntraj)]
    ckpt = np.arange(1, checkpoints + 1) * LAYERS // checkpoints
    c0, w0 = time.process_time(), time.perf_counter()
    out = simulate_sphere_flow(rngs, n=N, d=d, beta=float(beta), T=T, layers=LAYERS,
                               checkpoint_layers=ckpt, delta=PAPER.delta, eps=PAPER.eps,
                               threads=threads)
    assert not out["nonfinite"].any()
    return time.process_time() - c0, time.perf_counter() - w0


def fmt(seconds):
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe", type=int, default=32, help="trajectories per probe beta and d")
    ap.add_argument("--checkpoints", type=int, default=len(PAPER.time.checkpoint_layers),
                    help="checkpoints recorded (equally spaced; default: the paper scale's)")
    ap.add_argument("--dims", default=",".join(map(str, DIMS)))
    ap.add_argument("--run", default="", help="d values to run at full size, e.g. 2,8")
    ap.add_argument("--betas", type=int, default=len(BETAS),
                    help="run this many of the 90 betas (evenly spaced among them)")
    ap.add_argument("--threads", type=int, default=2, help="numba threads of the --run part")
    ap.add_argument("--write-spec", default=None, help="write the paper-scale spec here (YAML)")
    args = ap.parse_args()
    spec, ck = paper_spec(args.checkpoints), args.checkpoints
    if args.write_spec:
        Path(args.write_spec).write_text(yaml.safe_dump(spec, sort_keys=False))
        print(f"paper-scale spec written to {args.write_spec}")
    dims = [int(v) for v in args.dims.split(",")]
    load0 = os.getloadavg()
    for d in dims:  # compile / load every kernel variant first
        run_cell(d, 1.0, 2, 0, ck)
    per_traj = {}
    for d in dims:
        cpu = sum(run_cell(d, beta, args.probe, 1, ck)[0] for beta in PROBE_BETAS)
        per_traj[d] = cpu / (len(PROBE_BETAS) * args.probe)
    cells = len(BETAS) * DRAWS
    print(f"[GLPR-P] Fig. 3 at paper scale: n = {N}, {len(BETAS)} betas x {DRAWS} draws = "
          f"{cells} trajectories per d, T = {T}, h = {T / LAYERS}, {ck} checkpoints; "
          f"load average {load0[0]:.2f} on {os.cpu_count()} CPUs; per-trajectory CPU time from "
          f"{args.probe} trajectories x betas {PROBE_BETAS}, one thread")
    print(f"{'d':>5} {'ms/traj':>8} {'particle-steps/s':>17} {'CPU total':>10} "
          f"{'2 cores':>10} {'64 cores':>10}")
    total = 0.0
    for d in dims:
        cpu = per_traj[d] * cells
        total += cpu
        rate = N * LAYERS / per_traj[d]
        print(f"{d:5d} {1e3 * per_traj[d]:8.3f} {rate:17.3e} {fmt(cpu):>10} {fmt(cpu / 2):>10} "
              f"{fmt(cpu / 64):>10}")
    print(f"{'all':>5} {'':8} {'':17} {fmt(total):>10} {fmt(total / 2):>10} {fmt(total / 64):>10}")
    if not args.run:
        return
    run_dims = [int(v) for v in args.run.split(",")]
    betas = BETAS[np.linspace(0, len(BETAS) - 1, args.betas).round().astype(int)]
    print(f"run: d in {run_dims}, {len(betas)} betas x {DRAWS} draws, {args.threads} threads")
    grand = [0.0, 0.0, 0.0]
    for d in run_dims:
        cpu = wall = 0.0
        for beta in betas:
            c, w = run_cell(d, beta, DRAWS, 2, ck, args.threads)
            cpu, wall = cpu + c, wall + w
        projected = per_traj.get(d, np.nan) * len(betas) * DRAWS / args.threads
        grand = [grand[0] + wall, grand[1] + cpu, grand[2] + projected]
        print(f"  d = {d}: wall {fmt(wall)}, CPU {fmt(cpu)}; projected wall on {args.threads} "
              f"cores {fmt(projected)}")
    load1 = os.getloadavg()
    print(f"  all: wall {fmt(grand[0])}, CPU {fmt(grand[1])}, projected {fmt(grand[2])}; load "
          f"average {load0[0]:.2f} -> {load1[0]:.2f}")


if __name__ == "__main__":
    main()
