"""Device check of the sphere flow's GPU path with random weights (kernels/sphere/gpu_general.py):
[GLPR-P] Fig. 5's configurations against the numba kernel on one CPU core.

For each case (n = 32, d = 128, SA, h = 0.1, T = 30, 60 checkpoints; Q, K, V Ginibre as Fig. 5
(a), and Wigner / Wishart in the authors' scaling as Fig. 5 (b); and the plain flow by RK4, as
geshkovski2023-high-d at its paper scale) at beta = 1 and 9: a whole
call on the device (starts, weights, steps and outcomes there) and on the CPU kernel (one core,
fewer trajectories: rates scale linearly in them), in particle-steps/s (trajectories x n x
layers / s), their ratio, and the final mean frac_close and overlap_min of each side with the
difference in standard errors z (different streams, the same law: |z| < 4 expected). Writes
bench_sphere_gpu_weights.json and .md to --out. Needs numpy, numba, torch and tokensweep.kernels:

    mkdir -p /tmp/p && ln -sfn $PWD /tmp/p/tokensweep
    PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/p python3 benchmarks/bench_sphere_gpu_weights.py --out DIR

`--device cpu --quick` runs tiny sizes on torch's CPU device (a check of the script).
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # the CPU kernel on one core, as on a sweep's worker

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

START = time.perf_counter()
CASES = (("Fig. 5 (a)", dict(qk="ginibre", value="ginibre")),
         ("Fig. 5 (b)", dict(qk="wigner", value="wishart", ensemble_scaling="authors")),
         ("RK4, Q = K = V = I", dict(integrator="rk4")))  # the catalog's high-d entry at paper scale
SIZES = {"full": dict(d=128, layers=300, device_traj=2048, cpu_traj=16),
         "quick": dict(d=8, layers=30, device_traj=32, cpu_traj=8)}


def log(text):
    print(f"[{time.perf_counter() - START:6.1f} s] {text}", flush=True)


def run(count, seed, device, size, beta, precision="float64", **weights):
    import torch

    from tokensweep.kernels.sphere.flow import simulate_sphere_flow

    layers = size["layers"]
    every = max(1, layers // 60)
    kw = dict(n=32, d=size["d"], beta=beta, T=0.1 * layers, layers=layers,
              checkpoint_layers=list(range(every, layers + 1, every)), precision=precision,
              **weights)
    extra = {} if device == "numba" else {"device": torch.device(device)}
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    rngs = [np.random.default_rng([seed, r]) for r in range(count)]
    sync()
    t0 = time.perf_counter()
    out = simulate_sphere_flow(rngs, **kw, **extra)
    sync()
    return out, count * 32 * layers / (time.perf_counter() - t0)


def z_score(a, b):
    se = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    return float((a.mean() - b.mean()) / se) if se > 0 else 0.0


def case_row(name, weights, beta, device, size, budget):
    if time.perf_counter() - START > budget:
        log(f"skipped (past the {budget:.0f} s budget): {name} beta={beta}")
        return None
    run(2, 0, device, {**size, "layers": 2}, beta, **weights)  # compile / warm up
    run(2, 0, "numba", {**size, "layers": 2}, beta, **weights)
    dev, dev_rate = run(size["device_traj"], 1, device, size, beta, **weights)
    dev32, dev32_rate = run(size["device_traj"], 1, device, size, beta, "float32", **weights)
    cpu, cpu_rate = run(size["cpu_traj"], 2, "numba", size, beta, **weights)
    row = dict(case=name, beta=beta, d=size["d"], device_traj=size["device_traj"],
               cpu_traj=size["cpu_traj"], device_rate=dev_rate, device_rate_f32=dev32_rate,
               cpu_rate=cpu_rate, ratio=dev_rate / cpu_rate)
    for key in ("frac_close", "overlap_min"):
        a, b = dev[key][:, -1], cpu[key][:, -1]
        row[key] = (float(a.mean()), float(b.mean()), z_score(a, b))
    row["f32_frac_close_z"] = z_score(dev32["frac_close"][:, -1], dev["frac_close"][:, -1])
    log(f"{name} beta={beta}: device {dev_rate:.3g} (float32 {dev32_rate:.3g}), CPU core "
        f"{cpu_rate:.3g} particle-steps/s, x{row['ratio']:.1f}; frac_close {row['frac_close']}")
    return row


def markdown(rows, env):
    lines = [f"Measured by `benchmarks/bench_sphere_gpu_weights.py` on {env['device']} "
             f"(torch {env['torch']}), {time.strftime('%Y-%m-%d')}: n = 32, SA, h = 0.1, "
             "T = 30, 60 checkpoints; particle-steps/s of whole calls; final means (device / CPU "
             "kernel, z in standard errors of the difference).", "",
             "| case | d | beta | device f64 | device f32 | CPU core | device / CPU | "
             "frac_close (z) | overlap_min (z) | f32 vs f64 z |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r[k][0]:.4f} / {r[k][1]:.4f} ({r[k][2]:+.1f})"
                 for k in ("frac_close", "overlap_min")]
        lines.append(f"| {r['case']} | {r['d']} | {r['beta']} | {r['device_rate']:.3g} | "
                     f"{r['device_rate_f32']:.3g} | {r['cpu_rate']:.3g} | {r['ratio']:.1f} | "
                     + " | ".join(cells) + f" | {r['f32_frac_close_z']:+.1f} |")
    return "\n".join(lines) + "\n"


def main():
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget", type=float, default=240.0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    size = SIZES["quick" if args.quick else "full"]
    env = dict(device=(torch.cuda.get_device_name(0) if args.device.startswith("cuda")
                       else args.device), torch=torch.__version__)
    rows = [row for name, weights in CASES for beta in (1.0, 9.0)
            if (row := case_row(name, weights, beta, args.device, size, args.budget))]
    (args.out / "bench_sphere_gpu_weights.json").write_text(json.dumps(
        dict(environment=env, sizes=size, rows=rows), indent=1))
    text = markdown(rows, env)
    (args.out / "bench_sphere_gpu_weights.md").write_text(text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
