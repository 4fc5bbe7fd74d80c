"""The adaptive boundary search against a dense grid reaching the same interval width, in one run.

Both run through the real sweep flow (Prefect + a local Dask cluster) into stores, on the same
model, seed and level: two tokens, d = 5, P(antipodal) crossing 0.1 along beta in [0.5, 4.5]
(closed-form crossing 1.251; T = 10, h = 0.02, the same discrete model for both).

* adaptive: `pipeline.search_store.boundary_search`, to width W; cost = points x trajectories of its
  store;
* dense: beta on a grid of spacing W / 2 (so spacing W is its every other point), grown in
  trajectories until a grid reaches an interval of width <= W with the same decision rule
  (`boundary.sign`, each point a one-sided test at alpha / points: the union bound over the
  grid's points); cost = the cheapest (points x trajectories) of spacing W or W / 2 that gets
  there, read from prefixes of one dense store (trajectory j is the same in both). To keep the
  run short, only the dense points within NEAR_WIDTHS widths of the crossing are computed at the
  growing count; the others are computed at 3200 trajectories, where they are all decided far
  from the level, and are charged at the full count all the same (a dense grid computes every
  point at its count). The far points decide nothing about the interval's width.

    python benchmarks/bench_boundary.py [--width 0.125] [--folder DIR]
    python benchmarks/bench_boundary.py --closed-form-draws 40   # exact draws, 40 seeds, both cases

Prints both intervals, both costs and their ratio, the wall times and the load average.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from tokensweep.flows.cli.boundary import round_runner, search_cluster
from tokensweep.pipeline import theory
from tokensweep.pipeline.search import Design, search, sign
from tokensweep.pipeline.search_store import StoreEvaluate, boundary_search
from tokensweep.pipeline.spec.load import parse_sweep

LEVEL, D, LO, HI = 0.1, 5, 0.5, 4.5
NEAR_WIDTHS = 4  # dense points this close to the crossing are computed at every count tried
SPEC = {"name": "bench-boundary", "model": "stochastic_transformer", "attention": "sa",
        "grid": {"beta": [LO, HI], "d": D, "n": 2}, "time": {"T": 10.0, "layers": 500},
        "trajectories": 800, "partition_traj": 800, "seed": 20261125}


def dense_interval(counts: dict, design: Design) -> float:
    """Width of the dense grid's interval: adjacent decided points of opposite sign."""
    xs = sorted(counts)
    signs = {x: sign(*counts[x], design) for x in xs}
    above = [x for x in xs if signs[x] == 1]
    if signs[xs[0]] != -1 or not above:
        return np.inf
    b = min(above)
    return b - max(x for x in xs if signs[x] == -1 and x < b)


def main(width: float, workers: int | None, folder: str | None) -> None:
    from scipy.optimize import brentq

    truth = brentq(lambda b: theory.antipodal_probability(b, D) - LEVEL, 0.9, 3.0)
    folder = Path(folder or tempfile.mkdtemp(prefix="bench-boundary-"))  # a folder again: resumes
    sweep = parse_sweep({**SPEC, "store": str(folder / "spec.zarr")})
    with search_cluster(workers) as address:
        run = round_runner(address)
        t0 = time.perf_counter()
        found, = boundary_search(sweep, Design(level=LEVEL, width=width), run, folder=folder / "adaptive")
        t_adaptive = time.perf_counter() - t0
        fine = np.round(np.arange(LO, HI + width / 4, width / 2), 9).tolist()
        near = [x for x in fine if abs(x - found.estimate) <= NEAR_WIDTHS * width]
        far_store = StoreEvaluate(sweep.model_copy(update={"partition_traj": 3200}), "beta",
                                  {"d": D, "n": 2}, "antipodal", folder / "dense.zarr", run)
        near_store = StoreEvaluate(sweep.model_copy(update={"partition_traj": 3200}), "beta",
                                   {"d": D, "n": 2}, "antipodal", folder / "dense-near.zarr", run)
        t0 = time.perf_counter()
        far = far_store([x for x in fine if x not in near], 3200)
        best, n = None, 800
        while best is None and n <= 4 * found.max_n:
            near_store(near, max(n, 3200))
            counts = {**far, **near_store.count(near, n)}
            for grid in (fine[::2], fine):
                design = Design(level=LEVEL, width=width, looks=len(grid))
                if dense_interval({x: counts[x] for x in grid}, design) <= width + 1e-9:
                    cost = len(grid) * n
                    best = cost if best is None else min(best, cost)
            n *= 2
        t_dense = time.perf_counter() - t0
    print(f"closed-form crossing (h -> 0, T = inf): {truth:.4f}")
    print(f"adaptive: [{found.low:.4f}, {found.high:.4f}] (estimate {found.estimate:.4f}), "
          f"{found.points} points, counts up to {found.max_n}: {found.trajectories} trajectories "
          f"(one store per count), {t_adaptive:.0f} s")
    if best is None:
        print(f"dense: width {width} not reached by {len(fine)} points x {n // 2} trajectories "
              f"({len(fine) * (n // 2)}): ratio > {len(fine) * (n // 2) / found.trajectories:.1f}")
    else:
        print(f"dense: {best} trajectories reach width {width} ({t_dense:.0f} s to compute the "
              f"dense stores); ratio dense / adaptive = {best / found.trajectories:.1f}")
    print(f"load average: {os.getloadavg()[0]:.1f}")


# closed-form cases: name -> (d, x_lo, x_hi, starting points, their count, width)
CASES = {
    "docs": (D, LO, HI, 2, 800, 0.125),  # docs/open-problems.md's case
    "issue25": (D, 0.0, 5.0, 4, 400, 0.2),  # issue 25's held-out case: few, coarse first looks
}


def closed_form_draws(seeds: int, cases: list[str]) -> None:
    """The comparison on exact Bernoulli draws from the limit's closed form, over seeds, for the
    design before (`Design.legacy`) and now, on the same draws. Per search: its cost (one store
    per count), the dense grid of spacing W at the search's final count per point (the search
    page's comparison) and the cheapest dense grid that reaches the width (spacing W or W / 2,
    counts 800 x 2^k up to 2^15, its points' tests at alpha / points), and whether the interval
    holds the closed form's crossing."""
    from scipy.optimize import brentq

    from tokensweep.pipeline.report.search_page import dense_cost

    for name in cases:
        d, lo, hi, k, n0, width = CASES[name]
        truth = brentq(lambda b, d=d: theory.antipodal_probability(b, d) - LEVEL, theory.beta_c(d) + 1e-9, 4.0)
        probability = functools.cache(lambda x, d=d: theory.antipodal_probability(x, d))
        start = np.round(np.linspace(lo, hi, k), 9).tolist()

        def draws(seed, x, n, probability=probability):
            rng = np.random.default_rng([seed, int(round(x * 1e9))])
            return rng.random(n) < probability(x)

        print(f"case {name}: d = {d}, beta in [{lo:g}, {hi:g}], {k} starting points of {n0}, "
              f"width {width:g}, level {LEVEL:g}; closed-form crossing {truth:.4f}; {seeds} seeds")
        reach = [reaching_dense(seed, draws, lo, hi, width) for seed in range(seeds)]
        for legacy in (True, False):
            costs, at_final, reached, covered = [], [], [], 0
            for seed in range(seeds):
                looked = {}  # n -> points looked at with n trajectories: the search's store of n

                def evaluate(pts, n, looked=looked, seed=seed):
                    looked.setdefault(n, set()).update(pts)
                    return {x: (int(draws(seed, x, n).sum()), n) for x in pts}
                found = search(evaluate, start, n0, Design(level=LEVEL, width=width, legacy=legacy))
                cost = sum(n * len(points) for n, points in looked.items())  # one store per count
                costs.append(cost)
                at_final.append(dense_cost(lo, hi, width, found.max_n) / cost)
                reached.append(reach[seed] / cost if reach[seed] else np.inf)
                covered += found.status == "ok" and found.low <= truth <= found.high
            print(f"  {'before' if legacy else 'now':>6}: cost median {np.median(costs):.0f} "
                  f"(min {min(costs)}, max {max(costs)}); dense at its final count / cost: median "
                  f"{np.median(at_final):.1f}, min {min(at_final):.1f}; cheapest dense reaching the "
                  f"width / cost: median {np.median(reached):.1f}, min {min(reached):.1f}; "
                  f"{covered} of {seeds} intervals hold the crossing")


def reaching_dense(seed, draws, lo: float, hi: float, width: float) -> int | None:
    """The cheapest dense grid (spacing W or W / 2, counts 800 x 2^k up to 2^15) reaching width W."""
    dense = None
    for spacing in (width, width / 2):
        xs = np.round(np.arange(lo, hi + spacing / 2, spacing), 9).tolist()
        full = {x: draws(seed, x, 2**15) for x in xs}
        n = 800
        while n <= 2**15:
            counts = {x: (int(full[x][:n].sum()), n) for x in xs}
            if dense_interval(counts, Design(level=LEVEL, width=width, looks=len(xs))) <= width + 1e-9:
                dense = len(xs) * n if dense is None else min(dense, len(xs) * n)
                break
            n *= 2
    return dense


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=float, default=0.125)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--folder", default=None, help="where the stores go (again: resume)")
    parser.add_argument("--closed-form-draws", type=int, default=0, metavar="SEEDS",
                        help="instead: the comparison on exact draws from the closed form, "
                        "before and now (its own widths: --case)")
    parser.add_argument("--case", action="append", choices=list(CASES),
                        help="with --closed-form-draws: these cases only (default: all)")
    args = parser.parse_args()
    if args.closed_form_draws:
        closed_form_draws(args.closed_form_draws, args.case or list(CASES))
    else:
        main(args.width, args.workers, args.folder)
