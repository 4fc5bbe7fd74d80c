"""The stochastic transformer on a GPU against one CPU core, and the paper-scale onset table.

One prepared script for a machine with an NVIDIA GPU (a few minutes; `--budget` seconds for part 2):

    pip install 'numba-cuda[cu12]'     # or [cu13], matching the driver
    python benchmarks/bench_cuda.py --budget 240 --json cuda.json

1. Trajectory-steps per second of `kernels/stochastic/cuda.py` (all outcomes on the device),
   one thread per trajectory and one warp per trajectory (`layout`), against the CPU kernel on
   one core (threads=1), for n in {2, 4, 8, 16} and d in {4, 16, 64}, SA, beta = 2; compilation
   excluded (a warm-up launch first); "x one core" is the faster layout's. The same runs check
   the statistics: the final classes of the device's (thread layout) and the CPU's
   trajectories, chi-square two-sample p-value (agree: p > 1e-3). The layout columns are what
   `cuda.layout_for`'s thresholds are to be set from.
2. The paper-scale onset table of docs/open-problems.md (n in {2, 3, 4, 8, 16}, d in {3, 4, 5,
   8, 16}, T = 100, h = 0.01: 10 000 layers, eps = 1e-3): a timed probe per cell gives its rate;
   the projected time of the whole table is sum over cells of 500 000 trajectories x 10 000 layers
   / rate (the open problem's count per cell at width 0.05). Then, cheapest cells first, as many
   cells as fit in --budget: P(at least one antipodal pair at T) at 13 beta values from 0 to 3
   and the onset (where P crosses 0.05, linear between grid points).

`--tiny` runs a few trajectories of a few layers through numba-cuda's simulator (set
NUMBA_ENABLE_CUDASIM=1 before this script imports numba.cuda: --tiny does it), to check the
script itself without a GPU; its rates are the simulator's, meaningless.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

TABLE_N = (2, 3, 4, 8, 16)
TABLE_D = (3, 4, 5, 8, 16)
PER_CELL = 500_000  # trajectories per cell at width 0.05 (docs/open-problems.md)
TABLE_LAYERS = 10_000
ONSET_LEVEL = 0.05
EPS = 1e-3


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="simulator, tiny sizes (checks the script)")
    p.add_argument("--budget", type=float, default=240.0, help="seconds for part 2's cells")
    p.add_argument("--json", help="write the results here too")
    return p.parse_args(argv)


def device_run(key, ntraj, **kw):
    from tokensweep.kernels.stochastic.cuda import simulate_stochastic_cuda

    start = time.perf_counter()
    out = simulate_stochastic_cuda(key, range(ntraj), **kw)
    return out, time.perf_counter() - start


def cpu_run(ntraj, **kw):
    from tokensweep.kernels.stochastic.transformer import simulate_stochastic_transformer

    rngs = [np.random.default_rng([99, r]) for r in range(ntraj)]
    start = time.perf_counter()
    out = simulate_stochastic_transformer(rngs, threads=1, **kw)
    return out, time.perf_counter() - start


def classes_agree(a, b):
    from scipy import stats

    table = np.array([[np.sum(out["cluster_class"][:, -1] == c) for c in (0, 1, 2)] for out in (a, b)])
    table = table[:, table.sum(axis=0) > 0]
    return 1.0 if table.shape[1] < 2 else float(stats.chi2_contingency(table).pvalue)


def speed_table(tiny):
    ns, ds = ((2, 4), (4,)) if tiny else ((2, 4, 8, 16), (4, 16, 64))
    layers = 4 if tiny else 100
    n_dev, n_cpu = (8, 8) if tiny else (32768, 2000)
    rows = []
    for n in ns:
        for d in ds:
            kw = dict(n=n, d=d, beta=2.0, T=layers * 0.02, layers=layers, checkpoint_layers=[layers])
            rates, outs = {}, {}
            for layout in ("thread", "warp"):
                device_run((1, 2), 2, layout=layout, **dict(kw, layers=1, checkpoint_layers=[1]))
                outs[layout], t_dev = device_run((1, 2), n_dev, layout=layout, **kw)
                rates[layout] = n_dev * layers / t_dev
            dev = outs["thread"]
            cpu_run(2, **dict(kw, layers=1, checkpoint_layers=[1]))  # compile
            cpu, t_cpu = cpu_run(n_cpu, **kw)
            rate_cpu = n_cpu * layers / t_cpu
            best = max(rates.values())
            rows.append(dict(n=n, d=d, device_steps_per_s=best, thread_steps_per_s=rates["thread"],
                             warp_steps_per_s=rates["warp"], cpu_steps_per_s=rate_cpu,
                             speedup=best / rate_cpu, classes_p=classes_agree(dev, cpu)))
            r = rows[-1]
            print(f"| {n} | {d} | {rates['thread']:.3g} | {rates['warp']:.3g} | {rate_cpu:.3g} | "
                  f"{r['speedup']:.1f} | {r['classes_p']:.3g} "
                  f"({'agree' if r['classes_p'] > 1e-3 else 'DIFFER'}) |", flush=True)
    return rows


def onset(betas, p):
    """First beta where P crosses ONSET_LEVEL, linear between grid points (None if never)."""
    for i in range(1, len(betas)):
        if p[i - 1] < ONSET_LEVEL <= p[i]:
            return betas[i - 1] + (ONSET_LEVEL - p[i - 1]) * (betas[i] - betas[i - 1]) / (p[i] - p[i - 1])
    return None


def onset_table(tiny, budget):
    from tokensweep.kernels.lowlevel.philox import device_key
    from tokensweep.pipeline.seeds import cell_key

    ns, ds = ((2, 3), (3,)) if tiny else (TABLE_N, TABLE_D)
    layers = 6 if tiny else TABLE_LAYERS
    probe_traj, probe_layers = (4, 3) if tiny else (8192, 500)
    ntraj = 8 if tiny else 16384
    betas = np.linspace(0.0, 3.0, 3 if tiny else 13)
    rates = {}
    for n in ns:
        for d in ds:
            kw = dict(n=n, d=d, beta=2.0, T=probe_layers * 0.01, layers=probe_layers,
                      checkpoint_layers=[probe_layers])
            device_run((3, 4), 2, **dict(kw, layers=1, checkpoint_layers=[1]))  # compile
            _, t = device_run((3, 4), probe_traj, **kw)
            rates[(n, d)] = probe_traj * probe_layers / t
    projected = sum(PER_CELL * TABLE_LAYERS / r for r in rates.values())
    print(f"projected paper-scale table ({len(rates)} cells x {PER_CELL} trajectories x "
          f"{TABLE_LAYERS} layers) on this device: {projected / 3600:.2f} h", flush=True)
    cells, spent = [], 0.0
    for (n, d), rate in sorted(rates.items(), key=lambda item: -item[1]):
        cost = len(betas) * ntraj * layers / rate
        if spent + cost > budget:
            continue
        p_any = []
        for beta in betas:
            key = device_key(20261127, cell_key({"beta": float(beta), "d": d, "n": n}))
            out, t = device_run(key, ntraj, n=n, d=d, beta=float(beta), T=layers * 0.01,
                                layers=layers, checkpoint_layers=[layers], eps=EPS)
            spent += t
            p_any.append(float(np.mean(out["overlap_min"][:, -1] <= -1.0 + EPS)))
        cells.append(dict(n=n, d=d, trajectories=ntraj, p_any=p_any, onset=onset(betas, p_any)))
        print(f"| {n} | {d} | " + " | ".join(f"{p:.3f}" for p in p_any) +
              f" | {cells[-1]['onset']} |", flush=True)
    return dict(rates={f"{n},{d}": r for (n, d), r in rates.items()}, projected_hours=projected / 3600,
                betas=betas.tolist(), cells=cells, seconds=spent)


def main(argv=None) -> int:
    args = _args(sys.argv[1:] if argv is None else argv)
    if args.tiny:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    from tokensweep.kernels.stochastic.cuda import device_ready

    problem = device_ready()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    from numba import cuda

    name = "numba-cuda simulator" if args.tiny else cuda.get_current_device().name
    name = name.decode() if isinstance(name, bytes) else name
    print(f"device: {name}\n\n| n | d | thread layout steps/s | warp layout steps/s | one core "
          "steps/s | x one core | classes (chi2 p) |\n|---|---|---|---|---|---|---|", flush=True)
    result = dict(device=str(name), speed=speed_table(args.tiny))
    print("\n| n | d | P(any pair) at beta = 0..3 | onset |\n|---|---|---|---|", flush=True)
    result["onset"] = onset_table(args.tiny, args.budget)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
