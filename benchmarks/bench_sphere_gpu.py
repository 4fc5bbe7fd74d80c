"""Device check of the sphere flow's GPU path (kernels/sphere/gpu.py) against the numba kernel.

One run on a GPU machine prints, and writes to --out as bench_sphere_gpu.json and .md:

1. verification: the torch path (device, float64) against the CPU kernel (`simulate_sphere_flow`,
   one thread) from the same starts (the device's Philox starts, computed on the host by
   `gpu_starts.starts_on_host`, given to the CPU kernel as x0): n = 32, d in {2, 32, 128, 1024}, SA and USA (plus causal
   USA and V = -I at d = 32), beta = 1, T = 30, h = 0.1, checkpoints at 30, 100, 300 layers: the
   largest state and outcome differences, the fraction of equal cluster classes and counts;
2. float32 against float64 on the device: per-trajectory differences and the statistics (mean
   and standard error of the final overlap min, frac_close, energy, P(one cluster));
3. speed, particle-steps/s (trajectories x n x layers / s): the device's steps alone
   (synchronised), the same step jit-compiled in JAX on JAX's default device (the GPU where
   jax has CUDA; left out where jax is not installed), a whole call with one checkpoint
   (starts, steps and outcomes on the device; the host decides the hemisphere tests no cheap
   certificate settles, on its threads), a call with the catalog's 60 checkpoints on 1 and on
   all host threads,
   and the CPU kernel on one core on fewer trajectories (rates scale linearly in them): n = 32
   with 2048 trajectories at d in {2, 32, 128, 512, 1024} (whole calls on both sides), then
   n = 256 and 1024 at d = 128 and 512 (the CPU kernel's steps alone, and no whole call at
   n = 1024, d = 512: the outcomes' hemisphere test takes minutes per state there), float64
   and float32.

Cases run in that order until --budget seconds have passed since the start (numba's compilation
included); the rest are listed as skipped. Needs numpy, numba, torch and tokensweep.kernels only
(no zarr, Prefect, pydantic): run from the repository root without installing it as

    mkdir -p /tmp/p && ln -sfn $PWD /tmp/p/tokensweep
    PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/p python3 benchmarks/bench_sphere_gpu.py --out DIR

`--device cpu --quick` runs tiny sizes on torch's CPU device (a check of the script, < 1 min
once numba's cache is warm).
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # the CPU kernel on one core, as on a sweep's worker
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX beside torch on one GPU

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

START = time.perf_counter()
SIZES = {  # full: the device run; quick: the script's own check on a CPU
    "full": dict(n=32, verify_d=(2, 32, 128, 1024), verify_traj=128, layers=300,
                 ckpts=(30, 100, 300), f32_traj=2048, f32_d=(32, 128), speed_traj=2048,
                 speed_d=(2, 32, 128, 512, 1024), cpu_traj=128,
                 large=((256, 128, 128, 8, 50, True), (256, 512, 128, 8, 50, True),
                        (1024, 128, 16, 2, 20, True), (1024, 512, 16, 2, 20, False))),
    "quick": dict(n=8, verify_d=(2, 16), verify_traj=8, layers=30, ckpts=(3, 10, 30),
                  f32_traj=64, f32_d=(4,), speed_traj=64, speed_d=(2, 16), cpu_traj=8,
                  large=((32, 16, 16, 2, 10, True), (32, 64, 16, 2, 10, False))),
}
# large cases: (n, d, device trajectories, CPU trajectories, layers, whole calls): the outcomes'
# hemisphere test (Wolfe's algorithm) takes seconds to minutes per state from n ~ 512 tokens in
# d >= 256 (0.3 s at n = 1024, d = 128 on one core): there only the steps are timed


def log(text):
    print(f"[{time.perf_counter() - START:6.1f} s] {text}", flush=True)


def rngs(count, seed=20261126):
    return [np.random.default_rng([seed, r]) for r in range(count)]


class Bench:
    def __init__(self, device, budget):
        import torch

        from tokensweep.kernels.sphere.flow import simulate_sphere_flow

        self.torch, self.simulate = torch, simulate_sphere_flow
        self.device = torch.device(device)
        self.budget = budget
        self.skipped = []

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def time_left(self, name):
        if time.perf_counter() - START > self.budget:
            self.skipped.append(name)
            log(f"skipped (past the {self.budget:.0f} s budget): {name}")
            return False
        return True

    def run(self, count, on_device, graphs=True, same_starts=False, **kw):
        """(outputs, wall seconds) of simulate_sphere_flow on the device or the CPU kernel;
        graphs=False: the device's steps eager, not replayed from a CUDA graph; same_starts:
        the CPU kernel starts where the device does (drawn before the clock starts)."""
        from tokensweep.kernels.ensembles import UNIFORM_SPHERE
        from tokensweep.kernels.sphere import gpu as sphere_torch
        from tokensweep.kernels.sphere.gpu_starts import starts_on_host

        extra = {"device": self.device} if on_device else {}
        if same_starts and not on_device:
            extra = {"x0": starts_on_host(rngs(count), kw["n"], kw["d"], UNIFORM_SPHERE)}
        self.sync()
        sphere_torch.USE_GRAPHS = graphs
        try:
            t0 = time.perf_counter()
            out = self.simulate(rngs(count), **kw, **extra)
            self.sync()
        finally:
            sphere_torch.USE_GRAPHS = True
        return out, time.perf_counter() - t0


def flow(n, d, layers, ckpts, attention="sa", value="identity", precision="float64",
         threads=1, states=False):
    return dict(n=n, d=d, beta=1.0, T=0.1 * layers, layers=layers, checkpoint_layers=list(ckpts),
                attention=attention, value=value, precision=precision, threads=threads,
                return_states=states)


def deviation(a, b, name):
    both = np.isfinite(a[name]) & np.isfinite(b[name])
    return float(np.abs(a[name][both] - b[name][both]).max()) if both.any() else float("nan")


def verification(bench, size):
    """GPU float64 against the CPU kernel, trajectory by trajectory."""
    n, layers, ckpts, count = size["n"], size["layers"], size["ckpts"], size["verify_traj"]
    cases = [(d, att, "identity") for d in size["verify_d"] for att in ("sa", "usa")]
    cases += [(size["verify_d"][1], "causal_usa", "identity"),
              (size["verify_d"][1], "sa", "minus_identity")]
    rows = []
    for d, attention, value in cases:
        name = f"verify n={n} d={d} {attention} V={'-I' if value != 'identity' else 'I'}"
        if not bench.time_left(name):
            continue
        kw = flow(n, d, layers, ckpts, attention, value, states=True)
        cpu, t_cpu = bench.run(count, False, same_starts=True, **kw)
        gpu, t_gpu = bench.run(count, True, **kw)
        eager = bench.run(count, True, graphs=False, **kw)[0]
        row = dict(n=n, d=d, attention=attention, value=value, trajectories=count,
                   state=deviation(cpu, gpu, "states"),
                   graph_eager=deviation(eager, gpu, "states"),
                   overlap=max(deviation(cpu, gpu, k) for k in ("overlap_min", "overlap_max")),
                   energy=deviation(cpu, gpu, "energy"),
                   frac_close=deviation(cpu, gpu, "frac_close"),
                   same_class=float(np.mean(cpu["cluster_class"] == gpu["cluster_class"])),
                   same_count=float(np.mean(cpu["n_clusters"] == gpu["n_clusters"])),
                   same_t_hit=float(np.mean((cpu["t_hit"] == gpu["t_hit"])
                                            | (np.isnan(cpu["t_hit"]) & np.isnan(gpu["t_hit"])))),
                   nonfinite=(int(cpu["nonfinite"].sum()), int(gpu["nonfinite"].sum())),
                   cpu_s=t_cpu, gpu_s=t_gpu)
        rows.append(row)
        log(f"{name}: state {row['state']:.1e} (graph vs eager {row['graph_eager']:.1e}), overlaps {row['overlap']:.1e}, energy "
            f"{row['energy']:.1e}, frac_close {row['frac_close']:.1e}, same class "
            f"{row['same_class']:.4f}, same count {row['same_count']:.4f}, nonfinite "
            f"{row['nonfinite']} (CPU {t_cpu:.2f} s, device {t_gpu:.2f} s)")
    return rows


def mean_se(values):
    values = np.asarray(values, float)
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(len(values)))


def float32_statistics(bench, size):
    """GPU float32 against GPU float64 on the same starts."""
    from tokensweep.kernels.outcomes import SINGLE_CLUSTER

    n, layers, ckpts, count = size["n"], size["layers"], size["ckpts"], size["f32_traj"]
    rows = []
    for d in size["f32_d"]:
        for attention in ("sa", "usa"):
            name = f"float32 n={n} d={d} {attention}"
            if not bench.time_left(name):
                continue
            f64, _ = bench.run(count, True, **flow(n, d, layers, ckpts, attention))
            f32, _ = bench.run(count, True, **flow(n, d, layers, ckpts, attention, precision="float32"))
            row = dict(n=n, d=d, attention=attention, trajectories=count,
                       overlap_dev=deviation(f64, f32, "overlap_min"),
                       same_class=float(np.mean(f64["cluster_class"] == f32["cluster_class"])))
            for key, pick in (("overlap_min", lambda o: o["overlap_min"][:, -1]),
                              ("frac_close", lambda o: o["frac_close"][:, -1]),
                              ("energy", lambda o: o["energy"][:, -1]),
                              ("p_single", lambda o: o["cluster_class"][:, -1] == SINGLE_CLUSTER)):
                m64, se64 = mean_se(pick(f64))
                m32, se32 = mean_se(pick(f32))
                row[key] = dict(f64=m64, f32=m32, se=max(se64, se32),
                                z=(m32 - m64) / max(se64, se32, 1e-300))
            rows.append(row)
            log(f"{name}: max |overlap_min diff| {row['overlap_dev']:.1e}, same class "
                f"{row['same_class']:.4f}; " + ", ".join(
                    f"{k} {row[k]['f64']:.6f} vs {row[k]['f32']:.6f} (se {row[k]['se']:.1e})"
                    for k in ("overlap_min", "frac_close", "energy", "p_single")))
    return rows


def step_rate(bench, n, d, count, layers, precision, attention="sa", graphs=True):
    """Particle-steps/s of the device steps alone (starts on the device, synchronised); replayed
    from a CUDA graph (`sphere.gpu.GraphStep`) or, graphs=False, eager."""
    from tokensweep.kernels.sphere import gpu as sphere_torch

    torch = bench.torch
    dtype = torch.float32 if precision == "float32" else torch.float64
    m = min(n, d)  # d > n runs in the span of the start
    x = torch.randn(count, n, m, dtype=torch.float64, device=bench.device)
    x = (x / torch.linalg.vector_norm(x, dim=2, keepdim=True)).to(dtype)
    args = (0.1, 1.0, attention == "usa", False, 1.0, 0.0, False)
    for _ in range(2):  # warm-up
        x = sphere_torch.euler_step(x, *args)
    step = sphere_torch.GraphStep(x, *args) if graphs else lambda: sphere_torch.euler_step(x, *args)
    bench.sync()
    t0 = time.perf_counter()
    for _ in range(layers):
        x = step()
    bench.sync()
    return count * n * layers / (time.perf_counter() - t0)


def jax_step_rate(n, d, count, layers, precision):
    """Particle-steps/s of the same step jit-compiled in JAX on JAX's default device (the GPU
    where jax has CUDA): `bench_sphere_flow.jax_runner`, what a JAX user would write (einsum
    Gram, jax.nn.softmax, projection, retraction, lax.scan over the layers, at the full d);
    starts on the device, compilation excluded. None where jax is not installed."""
    try:
        import jax
    except ImportError:
        return None
    import bench_sphere_flow  # noqa: E402 (beside this script; sets one CPU thread for XLA)

    jax.config.update("jax_enable_x64", True)
    dtype = np.float32 if precision == "float32" else np.float64
    x = np.random.default_rng(0).standard_normal((count, n, d))
    x = jax.device_put((x / np.linalg.norm(x, axis=2, keepdims=True)).astype(dtype))
    run = bench_sphere_flow.jax_runner(layers)
    run(x).block_until_ready()  # compile
    t0 = time.perf_counter()
    run(x).block_until_ready()
    return count * n * layers / (time.perf_counter() - t0)


def cpu_step_rate(n, d, count, layers):
    """Particle-steps/s of the CPU kernel's steps alone (`sphere.symmetric.euler_step_t`, one
    call per step: for large n, where a step takes milliseconds)."""
    from tokensweep.kernels.sphere import symmetric as sphere_symmetric

    m = min(n, d)
    proto = np.empty(0)
    ws = sphere_symmetric.workspace_t(n, m, proto)
    states = []
    for r in range(count):
        x = np.random.default_rng(r).standard_normal((n, m))
        xe = np.ones((m + 1, n))
        xe[:m] = (x / np.linalg.norm(x, axis=1, keepdims=True)).T
        states.append(xe)
    sphere_symmetric.euler_step_t(states[0].copy(), 0.1, 1.0, False, False, 1.0, 0.0, ws)
    t0 = time.perf_counter()
    for xe in states:
        for _ in range(layers):
            sphere_symmetric.euler_step_t(xe, 0.1, 1.0, False, False, 1.0, 0.0, ws)
    return count * n * layers / (time.perf_counter() - t0)


def speed_case(bench, n, d, count, cpu_count, layers, precision, checkpoints60, whole):
    """One speed row: device steps, whole calls (1 and 60 checkpoints; `threads` host threads
    record), the CPU kernel on one core (whole calls at n = 32, steps alone for large n)."""
    threads = os.cpu_count() or 1
    particles = count * n * layers
    row = dict(n=n, d=d, precision=precision, trajectories=count, layers=layers,
               cpu_trajectories=cpu_count, threads=threads)
    row["steps"] = step_rate(bench, n, d, count, layers, precision,
                             graphs=bench.device.type == "cuda")
    row["eager_steps"] = step_rate(bench, n, d, count, layers, precision, graphs=False)
    row["jax_steps"] = jax_step_rate(n, d, count, layers, precision)
    if whole:
        bench.run(min(count, 4), True, **flow(n, d, 2, (2,), precision=precision))  # warm-up
        _, wall = bench.run(count, True, **flow(n, d, layers, (layers,), precision=precision,
                                                threads=threads))
        row["call"] = particles / wall
    if checkpoints60:
        every = max(1, layers // 60)
        ckpts = tuple(range(every, layers + 1, every))
        for k in sorted({1, threads}):
            _, wall60 = bench.run(count, True, **flow(n, d, layers, ckpts, precision=precision,
                                                      threads=k))
            row[f"call60_threads{k}"] = particles / wall60
    if precision == "float64" and checkpoints60:
        bench.run(1, False, **flow(n, d, 2, (2,)))  # the kernel's compile out of the timing
        _, wall_cpu = bench.run(cpu_count, False, **flow(n, d, layers, (layers,)))
        row["cpu_call"] = cpu_count * n * layers / wall_cpu
    elif precision == "float64":
        row["cpu_steps"] = cpu_step_rate(n, d, cpu_count, layers)
    return row


def speed(bench, size, quick):
    rows = []
    n, layers = size["n"], size["layers"]
    cases = [(n, d, size["speed_traj"], size["cpu_traj"], layers, p, True, True)
             for d in size["speed_d"] for p in ("float64", "float32")]
    cases += [(nn, d, traj, cpu, lay, p, False, whole)
              for nn, d, traj, cpu, lay, whole in size["large"] for p in ("float64", "float32")]
    for n_, d, count, cpu_count, lay, precision, ck60, whole in cases:
        name = f"speed n={n_} d={d} {precision} ({count} trajectories, {lay} layers)"
        if not bench.time_left(name):
            continue
        row = speed_case(bench, n_, d, count, cpu_count, lay, precision, ck60, whole)
        rows.append(row)
        log(f"{name}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()
                                    if (k in RATES and v is not None) or k.startswith("call60")) +
            " particle-steps/s")
    return rows


RATES = ("steps", "eager_steps", "jax_steps", "call", "cpu_call", "cpu_steps")


def environment(bench):
    import numba
    import torch

    env = dict(python=platform.python_version(), numpy=np.__version__, numba=numba.__version__,
               torch=torch.__version__, torch_cuda=torch.version.cuda, cpus=os.cpu_count(),
               device=str(bench.device), host=platform.node(), processor=platform.processor())
    if bench.device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(bench.device)
    try:
        import jax

        env["jax"], env["jax_device"] = jax.__version__, str(jax.devices()[0])
    except ImportError:
        env["jax"] = None
    return env


def _e(value):
    return "-" if value is None else f"{value:.2e}"


def markdown(result):
    """The tables of docs/models.md section 2.10 (replacing its placeholder)."""
    env = result["environment"]
    lines = [f"Measured by `benchmarks/bench_sphere_gpu.py` on {env.get('gpu', env['device'])} "
             f"(torch {env['torch']}, CUDA {env['torch_cuda']}, {env['cpus']} CPUs; CPU kernel "
             f"on one core of the same machine), {time.strftime('%Y-%m-%d')}.", "",
             "Verification, device float64 against the CPU kernel (the same starts; max |diff|"
             " over trajectories and checkpoints; graph vs eager: the states of the device's "
             "CUDA-graph steps against its eager steps):", "",
             "| n | d | attention | V | traj | states | overlaps | energy | frac_close | "
             "same class | same count | graph vs eager |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["verification"]:
        lines.append(f"| {r['n']} | {r['d']} | {r['attention']} | "
                     f"{'-I' if r['value'] != 'identity' else 'I'} | {r['trajectories']} | "
                     f"{r['state']:.1e} | {r['overlap']:.1e} | {r['energy']:.1e} | "
                     f"{r['frac_close']:.1e} | {r['same_class']:.4f} | {r['same_count']:.4f} | "
                     f"{r['graph_eager']:.1e} |")
    lines += ["", "float32 against float64 on the device (final checkpoint; mean, and the "
              "difference in standard errors z):", "",
              "| n | d | attention | traj | max overlap diff | same class | overlap_min (z) | "
              "frac_close (z) | energy (z) | P(one cluster) (z) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["float32"]:
        cells = " | ".join(f"{r[k]['f64']:.4f} / {r[k]['f32']:.4f} ({r[k]['z']:+.1f})"
                           for k in ("overlap_min", "frac_close", "energy", "p_single"))
        lines.append(f"| {r['n']} | {r['d']} | {r['attention']} | {r['trajectories']} | "
                     f"{r['overlap_dev']:.1e} | {r['same_class']:.4f} | {cells} |")
    lines += ["", "Speed, particle-steps/s (SA, beta = 1, h = 0.1): the device's steps alone "
              "(each replayed from a CUDA graph, as the path runs them; eager: launched one "
              "kernel at a time, as before the graphs); "
              "a whole call with one checkpoint (starts, steps and outcomes on the device, undecided "
              "hemisphere tests on all host threads), and with 60 checkpoints on 1 / all host threads (their "
              "number in brackets); the CPU kernel on one core: a whole call with one "
              "checkpoint (n = 32) or its steps alone (large n); host share: the part of the "
              "60-checkpoint call (all threads; else the one-checkpoint call) not spent in "
              "device steps; JAX: the same step jit-compiled in JAX on "
              f"{env.get('jax_device') or 'no device (jax not installed)'} at the full d, steps "
              "alone, and the device steps over it:", "",
              "| n | d | precision | traj | layers | device steps | eager steps | JAX steps | "
              "device / JAX | "
              "call, 1 ck | 60 ck, 1 thread | 60 ck, all threads | host share | CPU call | "
              "CPU steps | device / CPU |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["speed"]:
        t = r["threads"]
        all_threads = r.get(f"call60_threads{t}")
        slowest = all_threads or r.get("call")
        share = None if slowest is None else 1.0 - slowest / r["steps"]
        cpu = r.get("cpu_call") or r.get("cpu_steps")
        ratio = None if cpu is None else (r["call"] if "cpu_call" in r else r["steps"]) / cpu
        jax_rate = r.get("jax_steps")
        text = [_e(v) for v in (r["steps"], r.get("eager_steps"), jax_rate)]
        text.append("-" if jax_rate is None else f"{r['steps'] / jax_rate:.1f}")
        text += [_e(v) for v in (r.get("call"), r.get("call60_threads1"), all_threads)]
        text[6] += f" ({t})" if all_threads is not None else ""
        text += ["-" if share is None else f"{100 * share:.0f} %", _e(r.get("cpu_call")),
                 _e(r.get("cpu_steps")), "-" if ratio is None else f"{ratio:.1f}"]
        lines.append(f"| {r['n']} | {r['d']} | {r['precision']} | {r['trajectories']} | "
                     f"{r['layers']} | " + " | ".join(text) + " |")
    if result["skipped"]:
        lines += ["", f"Skipped (past the time budget): {'; '.join(result['skipped'])}."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the .json and .md")
    ap.add_argument("--device", default="cuda", help="torch device (cpu: check the script)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes")
    ap.add_argument("--budget", type=float, default=280.0,
                    help="start no case past this many seconds (compilation included)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    size = SIZES["quick" if args.quick else "full"]
    bench = Bench(args.device, args.budget)
    result = dict(environment=environment(bench), sizes=size, budget_s=args.budget)
    log(f"environment: {result['environment']}")
    t0 = time.perf_counter()
    kw = flow(size["n"], size["verify_d"][-1], 4, (2, 4), states=True)  # compile both paths
    bench.run(2, False, **kw)
    bench.run(2, True, **kw)
    bench.run(2, True, **{**flow(size["n"], 3, 4, (4,), "usa"), "precision": "float32"})
    result["compile_s"] = time.perf_counter() - t0
    log(f"numba compile / cache load and device warm-up: {result['compile_s']:.1f} s")
    sections = (("verification", lambda: verification(bench, size)),
                ("float32", lambda: float32_statistics(bench, size)),
                ("speed", lambda: speed(bench, size, args.quick)))
    for key, section in sections:
        try:
            result[key] = section()
        except Exception as err:  # one section failing must not lose the others' numbers
            log(f"{key} failed: {type(err).__name__}: {err}")
            result[key], result[f"{key}_error"] = [], f"{type(err).__name__}: {err}"
    result["skipped"] = bench.skipped
    result["total_s"] = time.perf_counter() - START
    (args.out / "bench_sphere_gpu.json").write_text(json.dumps(result, indent=1, default=str))
    text = markdown(result)
    (args.out / "bench_sphere_gpu.md").write_text(text)
    print(text, flush=True)
    log(f"done: {args.out}/bench_sphere_gpu.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
