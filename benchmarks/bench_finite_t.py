"""Finite-T theory against the pipeline's cubes, at checkpoints where many pairs are unresolved.

Run:  python benchmarks/bench_finite_t.py [--trajectories 6000] [--layers 1000 2000 4000]
      (stochastic: SA, d in {3, 4}, beta in {1, 2}, T = 5; hybrid: SA, beta = 1,
      sigma in {sqrt(1.4), 1.6}, d = 3, T = 10; one cube per layer count)

For every model, cell, checkpoint and class (antipodal, single, unresolved): the simulated fraction
at each step h = T / layers (the real path: spec -> store -> numba kernel -> antipodal_table), its
h -> 0 extrapolation (`analysis.step_bias.zero_step_fit`, linear, 99 %), the backward-equation
probability at t (`theory.finite`) and, for P(antipodal), the closed form (t = infinity). The
slope column is the measured O(h) bias per unit h (with its 99 % interval), the number the
finite-T simulation tests widen by.
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import xarray as xr

from tokensweep.pipeline.analysis.antipodal import antipodal_table
from tokensweep.pipeline.analysis.step_bias import zero_step_fit
from tokensweep.pipeline.execute import pending_partitions, run_partition
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.lifecycle import prepare_store

CLASSES = (("antipodal", "n_antipodal", "theory_t"), ("single", "n_single", "single_t"),
           ("unresolved", "n_unresolved", "unresolved_t"))


def run(spec, layers, tmp):
    sweep = parse_sweep({**spec, "time": {**spec["time"], "layers": layers}})
    store = Path(tmp) / f"{spec['name']}-{layers}.zarr"
    prepare_store(sweep, store)
    for i in pending_partitions(sweep, store):
        run_partition(sweep, store, i)
    return xr.open_zarr(store, consolidated=False)


def compare(spec, layer_counts, times, cells):
    T = spec["time"]["T"]
    hs = [T / n for n in layer_counts]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        cubes = [run(spec, n, tmp) for n in layer_counts]
        wall = time.perf_counter() - start
        print(f"\n{spec['model']} ({spec['attention']}), {spec['trajectories']} trajectories per cell and h, "
              f"simulation {wall:.1f} s")
        print("| cell | t | class | " + " | ".join(f"h = {h:.4g}" for h in hs)
              + " | h -> 0 [99 %] | slope per unit h [99 %] | theory at t | t = inf |")
        print("|" + "---|" * (len(hs) + 7))
        for t in times:
            tables = [antipodal_table(ds, t=t, level=0.99) for ds in cubes]
            for cell in cells:
                for name, count, column in CLASSES:
                    sub = [tab.sel(cell).squeeze() for tab in tables]
                    k = np.array([int(s[count]) for s in sub])
                    N = np.array([int(s.n_traj) for s in sub])
                    fit = zero_step_fit(hs, k, N, degree=1, level=0.99)
                    inf = f"{float(sub[0].theory):.4f}" if name == "antipodal" else ""
                    label = ", ".join(f"{k_}={v:g}" for k_, v in cell.items())
                    print(f"| {label} | {t:g} | {name} | " + " | ".join(f"{a / b:.4f}" for a, b in zip(k, N))
                          + f" | {fit['p0']:.4f} [{fit['lo']:.4f}, {fit['hi']:.4f}] | {fit['slope']:+.3f} ± {2.576 * fit['slope_se']:.3f} "
                          f"| {float(sub[0][column]):.4f} | {inf} |")
        for ds in cubes:
            ds.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=6000)
    ap.add_argument("--layers", type=int, nargs="+", default=[1000, 2000, 4000])
    ap.add_argument("--only", choices=("stochastic", "hybrid"))
    args = ap.parse_args()
    common = {"trajectories": args.trajectories, "partition_traj": args.trajectories, "seed": 20261125}
    if args.only != "hybrid":
        spec = {"name": "finite-t", "model": "stochastic_transformer", "attention": "sa",
                "grid": {"beta": [1.0, 2.0], "d": [3, 4], "n": 2},
                "time": {"T": 5.0, "checkpoints": 5}, **common}
        compare(spec, args.layers, [1.0, 5.0],
                [{"d": d, "beta": b} for d in (3, 4) for b in (1.0, 2.0)])
    if args.only != "stochastic":
        sigmas = [float(np.sqrt(1.4)), 1.6]
        spec = {"name": "finite-t-hybrid", "model": "hybrid", "attention": "sa",
                "grid": {"beta": [1.0], "sigma": sigmas, "d": 3, "n": 2},
                "time": {"T": 10.0, "checkpoints": 2}, **common}
        compare(spec, args.layers, [5.0, 10.0], [{"sigma": s} for s in sigmas])


if __name__ == "__main__":
    main()
