"""Early stopping (stop_when_resolved) on the [F26] Fig. 3 grid: bias against full runs, and speed.

Run:  python benchmarks/bench_early_stop.py [--trajectories 400] [--windows 1 2 3] [--threads 2]
          [--scale paper|small] [--quick]
      (the paper's grid, 400 trajectories per cell: a few minutes on 2 cores; --scale small: the
      catalog's CI grid, seconds; --quick: 3 cells)

The spec is catalog/fedorov2026-fig3.yaml at `--scale` (paper: two tokens, SA, d in
{3, 4, 5, 6, 8}, 31 beta in [0, 3], T = 100, h = 0.01, 20 checkpoints; small: d in {3, 5, 8},
7 beta, T = 30, 6 checkpoints) with fewer trajectories, run through the model plug-in once
in full and once per window with early stopping; the streams are the pipeline's (seed, cell,
trajectory), so the runs are paired trajectory by trajectory. One table, one row per window:

- max |dP|: the largest |P_early - P_full| of P(antipodal at T) over the cells, with the cell and
  the binomial standard error sqrt(P (1 - P) / N) of one estimate there (the error bar the report
  puts on P); dP is a paired difference, so it is usually far below that error;
- away from beta_c: max |dP| over the cells with beta >= beta_c(d) + 0.2 (the cells where the
  report holds the theory, docs/models.md section 4.3; near beta_c the pair leaves -1 again);
- mean |dP|: over the cells;
- changed: fraction of all trajectories whose final class differs from the full run's;
- speed-up: wall time of the full run / wall time of the early-stopped run (same threads).
"""

import argparse
import itertools
import time
from pathlib import Path

import numpy as np

from tokensweep.pipeline import theory
from tokensweep.pipeline.models import get_model
from tokensweep.pipeline.seeds import trajectory_rngs
from tokensweep.pipeline.spec.load import load_sweep

SPEC = Path(__file__).resolve().parents[1] / "catalog" / "fedorov2026-fig3.yaml"
ANTIPODAL = 2


def run_grid(sweep, cells, ntraj):
    """Final classes (cells, ntraj) and the wall time of simulating them."""
    model = get_model(sweep.model)
    final = np.empty((len(cells), ntraj), dtype=np.int8)
    t0 = time.perf_counter()
    for q, coords in enumerate(cells):
        out = model.simulate(sweep, coords, trajectory_rngs(sweep.seed, coords, range(ntraj)))
        final[q] = out["cluster_class"][:, -1]
    return final, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=400)
    ap.add_argument("--windows", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--scale", choices=["paper", "small"], default="paper")
    ap.add_argument("--quick", action="store_true", help="3 cells only (a smoke test)")
    args = ap.parse_args()
    ntraj = args.trajectories
    scale = None if args.scale == "small" else args.scale
    sweep = load_sweep(SPEC, scale, trajectories=ntraj, partition_traj=ntraj)
    sweep = sweep.model_copy(update={"threads": args.threads})
    cells = [dict(zip(sweep.axes, values)) for values in itertools.product(*sweep.axes.values())]
    if args.quick:
        d0 = sweep.axes["d"][0]
        cells = [c for c in cells if c["beta"] in (0.0, 1.5, 3.0) and c["d"] == d0]
    # warm-up (compile or load the kernels) outside the timings
    run_grid(sweep.model_copy(update={"stop_when_resolved": True}), cells[:1], 2)
    run_grid(sweep, cells[:1], 2)
    full, t_full = run_grid(sweep, cells, ntraj)
    p_full = (full == ANTIPODAL).mean(axis=1)
    away = np.array([c["beta"] >= theory.beta_c(c["d"]) + 0.2 - 1e-9 for c in cells])
    print(f"{SPEC.name} ({args.scale}): {len(cells)} cells x {ntraj} trajectories, "
          f"T = {sweep.time.T}, layers = {sweep.time.layers}, "
          f"{len(sweep.time.checkpoint_layers)} checkpoints, threads = {args.threads}; "
          f"full run {t_full:.1f} s")
    head = (f"{'window':>6} {'span (t)':>8} | {'max |dP|':>8} {'at (d, beta)':>13} {'SE there':>8} "
            f"{'away from beta_c':>16} {'mean |dP|':>9} | {'changed':>8} | {'time (s)':>8} "
            f"{'speed-up':>8}")
    print(head)
    print("-" * len(head))
    dt = sweep.time.T / len(sweep.time.checkpoint_layers)
    for window in args.windows:
        early_sweep = sweep.model_copy(update={"stop_when_resolved": True, "resolved_window": window})
        early, t_early = run_grid(early_sweep, cells, ntraj)
        dp = (early == ANTIPODAL).mean(axis=1) - p_full
        q = int(np.argmax(np.abs(dp)))
        se = np.sqrt(p_full[q] * (1 - p_full[q]) / ntraj)
        where = f"({cells[q]['d']}, {cells[q]['beta']:.1f})"
        print(f"{window:>6} {(window - 1) * dt:>8.1f} | {abs(dp[q]):>8.4f} {where:>13} {se:>8.4f} "
              f"{np.abs(dp[away]).max(initial=0):>16.4f} "
              f"{np.abs(dp).mean():>9.5f} | {np.mean(early != full):>8.5f} | {t_early:>8.1f} "
              f"{t_full / t_early:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
