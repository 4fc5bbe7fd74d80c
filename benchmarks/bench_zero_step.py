"""The h -> 0 extrapolation and the finite-T theory against the pipeline's own cubes.

Run:  python benchmarks/bench_zero_step.py [--T 20] [--layers 400 800 2000] [--beta 1.5 3]
          [--d 4 8] [--trajectories 4000] [--attention sa]

One sweep of the deep stochastic transformer with `layers` as a grid axis (the real path: spec
-> store -> numba kernel -> antipodal_table), then per cell: P(antipodal) at every h, the linear
and quadratic WLS extrapolations to h = 0 with their 99 % intervals
(`analysis.step_bias.zero_step_table`), the finite-T theory at T (`theory.finite`) and the
closed form (T = infinity), and whether each interval holds the finite-T theory (no widening).
"""

import argparse
import tempfile
import time
from pathlib import Path

import xarray as xr

from tokensweep.pipeline.analysis.antipodal import antipodal_table
from tokensweep.pipeline.analysis.step_bias import zero_step_table
from tokensweep.pipeline.execute import pending_partitions, run_partition
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.lifecycle import prepare_store


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=float, default=20.0)
    ap.add_argument("--layers", type=int, nargs="+", default=[400, 800, 2000])
    ap.add_argument("--beta", type=float, nargs="+", default=[1.5, 3.0])
    ap.add_argument("--d", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--trajectories", type=int, default=4000)
    ap.add_argument("--attention", default="sa")
    ap.add_argument("--seed", type=int, default=20261127)
    args = ap.parse_args()
    sweep = parse_sweep({
        "name": "zero-step", "model": "stochastic_transformer", "attention": args.attention,
        "grid": {"beta": args.beta, "d": args.d, "n": 2, "layers": args.layers},
        "time": {"T": args.T, "checkpoints": 1}, "trajectories": args.trajectories,
        "partition_traj": args.trajectories, "seed": args.seed})
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "cube.zarr"
        start = time.perf_counter()
        prepare_store(sweep, store)
        for i in pending_partitions(sweep, store):
            run_partition(sweep, store, i)
        wall = time.perf_counter() - start
        with xr.open_zarr(store, consolidated=False) as ds:
            table = antipodal_table(ds, level=0.99)
            fit = zero_step_table(table, args.T, level=0.99)
            hs = args.T / table.layers.values
            print(f"T = {args.T:g}, {args.trajectories} trajectories per cell and h, simulation {wall:.1f} s")
            print("| d | beta | " + " | ".join(f"p (h = {h:.3g})" for h in hs)
                  + " | h -> 0 linear [99 %] | chi2/dof | h -> 0 quadratic [99 %] | theory at T | T = inf "
                  "| agrees (lin, quad) |")
            print("|" + "---|" * (len(hs) + 8))
            for d in table.d.values:
                for beta in table.beta.values:
                    cell = table.sel(d=d, beta=beta).squeeze()
                    f = fit.sel(d=d, beta=beta).squeeze()
                    target = float(f.theory_t)
                    lin = f.lo <= target <= f.hi
                    quad = f.lo_quad <= target <= f.hi_quad
                    print(f"| {d} | {beta:g} | " + " | ".join(f"{float(p):.4f}" for p in cell.p_antipodal.values)
                          + f" | {float(f.p0):.4f} [{float(f.lo):.4f}, {float(f.hi):.4f}]"
                          f" | {float(f.chi2):.1f}/{int(f.dof)}"
                          f" | {float(f.p0_quad):.4f} [{float(f.lo_quad):.4f}, {float(f.hi_quad):.4f}]"
                          f" | {target:.4f} | {float(f.theory):.4f} | {bool(lin)}, {bool(quad)} |")


if __name__ == "__main__":
    main()
