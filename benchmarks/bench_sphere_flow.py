"""Speed of the deterministic SA retraction-Euler step on one core: the kernel against batched
NumPy, the peer's algorithm written in NumPy, a jit-compiled JAX version, and the DGEMM peak.

The problem: SA, Q = K = V = I, beta = 1, h = 0.1, n = 32 tokens, d in {2, 32, 128} by default.
Unit: particle-steps per second (one token advanced by one step = 1) of CPU time (the process's:
the machine is shared, and every method runs one compute thread), best of R repeats, every
method measured in turn within each repeat; the load average is printed.

- kernel: `simulate_sphere_flow` (300 layers, one checkpoint at the end). For d > n it integrates
  in the n-dimensional span of the start (`sphere.symmetric`); `full d`: the same without that
  reduction. `60 ck`: the catalog's 60 checkpoints (overlaps, cluster count, frac_close, energy,
  hemisphere test every 5th step). `f32`: precision="float32".
- numpy: B = 2048 systems as one (B, n, d) tensor, logits by batched matmul, softmax with the row
  max subtracted, tangent projection, x + h a, renormalisation (allocating, as in the old table).
- peer: the step of `phase-diagrams.py` (borjanG/2023-transformers-rotf, `simu_xform.step_1`,
  PyTorch) written in NumPy the way it is written there: preallocated (B, n, n) and (B, n, d)
  buffers filled by matmul(out=), softmax along the last axis, a = eta * W x added to x, then
  normalise. Its published step is N(x + h A) without the tangent projection, which is the same
  as a step of h / (1 + h <x, A>) <= h of the projected scheme (up to 9 % slower in time at
  h = 0.1); here the projection is added (`--published` leaves it out), so that it computes the
  same states as the kernel: printed below the table as the largest state difference after 30
  steps from the same starts.
- jax: the same step in JAX (einsum Gram, jax.nn.softmax, projection, retraction), float64,
  batch as the leading axis, `lax.scan` over the steps of one measurement, jit-compiled (compile
  time excluded), one compute thread (`import_jax_one_core`). Skipped with a note when jax is not
  installed (`pip install -e .[bench]` or `pip install jax`).
- span: what a user waits for, one partition of `SPAN_TRAJECTORIES` trajectories (one cell, one
  checkpoint, T = 30, 300 layers) run by `pipeline.execute.run_partition` into a fresh zarr store:
  its started..finished span (generators, kernel, outcome recording, the write, the status) in
  the process's CPU time (the stored span is wall time, inflated by the machine's load); the
  store's creation before it (once per sweep, ~0.1 s) is not timed. `k/x` ratios over the peer
  and JAX are printed for it too (`span/peer`, `span/jax`).
- peak: numpy matmul of two 1024 x 1024 float64 matrices on one OpenBLAS thread, GFLOP/s.
  `%pk` columns: the flops of one step over (time per step x peak), with
  F = 4 n^2 d (the Gram X X^T and the product W X, 2 n^2 d each, as dense products: what the
  kernel computes too) + 4 n^2 (shift, exponential counted as one flop, row sum,
  normalisation) + 9 n d (projection, step, norm); the reduced kernel's F has d = n. F is the
  dense count for every method: the kernel computes only the Gram's upper blocks of 8 rows
  (`kernels/lowlevel/gemm.py`: 5/8 of the Gram's flops at n = 32), so its `%pk` is of useful work.

The measured table (before / after the Gram's blocks) is in docs/models.md section 2.9.

    python benchmarks/bench_sphere_flow.py [--repeats R] [--seconds S] [--sizes 32x2,32x32]
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one core for every side, set before numpy / numba / jax load
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                           " intra_op_parallelism_threads=1").strip()

import argparse  # noqa: E402
import importlib  # noqa: E402
import inspect  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

BETA = 1.0
H = 0.1
LAYERS = 300  # the catalog's T = 30 at h = 0.1
BATCH = 2048  # systems per batched step (numpy, peer, jax)
SPAN_TRAJECTORIES = 2048  # one partition of the span column (issue 11 item 7's)
SIZES = [(32, 2), (32, 32), (32, 128)]
TARGET_SECONDS = 0.6  # per measurement
REPEATS = 5


# ---------------------------------------------------------------------------------------------
# the batched steps


def numpy_batched(x, steps, beta=BETA, h=H):
    """Retraction Euler for SA with Q = K = V = I on a batch x (B, n, d), in place."""
    for _ in range(steps):
        logits = beta * np.matmul(x, x.transpose(0, 2, 1))
        logits -= logits.max(axis=2, keepdims=True)
        w = np.exp(logits)
        w /= w.sum(axis=2, keepdims=True)
        a = np.matmul(w, x)
        a -= np.sum(x * a, axis=2, keepdims=True) * x
        x += h * a
        x /= np.linalg.norm(x, axis=2, keepdims=True)
    return x


class PeerStep:
    """The peer's step (phase-diagrams.py, `step_1` with use_softmax, Q^T K = V = I) in NumPy:
    m the particles (B, n, d), sm the (B, n, n) logits / weights, m2 the (B, n, d) output."""

    def __init__(self, m, beta=BETA, eta=H, project=True):
        self.m, self.beta, self.eta, self.project = m, beta, eta, project
        self.m2 = np.empty_like(m)
        self.sm = np.empty(m.shape[:2] + (m.shape[1],))
        self.col = np.empty(m.shape[:2] + (1,))

    def softmax(self):  # torch.nn.functional.softmax(dim=2): exp(s - max) / sum
        sm, col = self.sm, self.col
        np.max(sm, axis=2, keepdims=True, out=col)
        sm -= col
        np.exp(sm, out=sm)
        np.sum(sm, axis=2, keepdims=True, out=col)
        sm /= col

    def step(self):
        m, m2, sm, col = self.m, self.m2, self.sm, self.col
        np.matmul(m, m.transpose(0, 2, 1), out=sm)
        sm *= self.beta
        self.softmax()
        np.matmul(sm, m, out=m2)
        if self.project:  # the tangent projection the published step leaves out
            np.einsum("bnd,bnd->bn", m, m2, out=col[..., 0])
            m2 -= col * m
        m2 *= self.eta
        m2 += m
        np.einsum("bnd,bnd->bn", m2, m2, out=col[..., 0])  # normalize(m2, dim=2, out=m)
        np.sqrt(col, out=col)
        np.maximum(col, 1e-12, out=col)
        np.divide(m2, col, out=m)

    def run(self, steps):
        for _ in range(steps):
            self.step()
        return self.m


def import_jax_one_core():
    """jax with one compute thread, or None where it is not installed. XLA sizes its CPU thread
    pool from the process's CPU affinity when its client starts (the XLA_FLAGS above do not stop
    jax 0.10 from using every core): start it pinned to one CPU, then give every thread of the
    process its affinity back (the one XLA thread included: it may run on any core, as the other
    methods' single thread does)."""
    try:
        import jax
    except ImportError:
        return None
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        jax.config.update("jax_enable_x64", True)
        jax.devices()  # starts the CPU client and its thread pool
    finally:
        for task in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(task), cpus)
    return jax


def jax_runner(steps, beta=BETA, h=H):
    """A jit-compiled function x (B, n, d) -> x after `steps` retraction-Euler steps, or None."""
    try:
        import jax
    except ImportError:
        return None
    import jax.numpy as jnp

    def step(x, _):
        g = jnp.einsum("bnd,bmd->bnm", x, x)
        w = jax.nn.softmax(beta * g, axis=-1)
        a = jnp.einsum("bnm,bmd->bnd", w, x)
        a = a - jnp.sum(x * a, axis=-1, keepdims=True) * x
        y = x + h * a
        return y / jnp.linalg.norm(y, axis=-1, keepdims=True), None

    @jax.jit
    def run(x):
        return jax.lax.scan(step, x, None, length=steps)[0]

    return run


# ---------------------------------------------------------------------------------------------
# measurements


def timed(fn):
    """CPU seconds of fn() (the process's: robust to other processes time-slicing the cores;
    every method runs one compute thread)."""
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def starts(batch, n, d, seed=0):
    x = np.random.default_rng(seed).standard_normal((batch, n, d))
    return x / np.linalg.norm(x, axis=2, keepdims=True)


def dgemm_peak(size=1024, repeats=5):
    """GFLOP/s of numpy matmul on one BLAS thread, best of `repeats`."""
    a, b = np.random.default_rng(1).standard_normal((2, size, size))
    c = np.empty((size, size))
    np.matmul(a, b, out=c)
    return 2.0 * size**3 / min(timed(lambda: np.matmul(a, b, out=c)) for _ in range(repeats)) / 1e9


def step_flops(n, d):
    """Nominal flops of one step of one system (module docstring)."""
    return 4.0 * n * n * d + 4.0 * n * n + 9.0 * n * d


class Methods:
    """One callable per method, each returning the particle-steps it did; sized once per (n, d)."""

    def __init__(self, sf, n, d, seconds, published, with_span):
        self.sf, self.n, self.d, self.with_span = sf, n, d, with_span
        params = set(inspect.signature(sf.simulate_sphere_flow).parameters)
        options = getattr(sf, "SphereFlowOptions", None)  # its keywords as one record (issue 23)
        params |= set(getattr(options, "__dataclass_fields__", ()))
        self.has_precision = "precision" in params
        self.symmetric = getattr(sf, "symmetric", None)  # the span reduction's switch, if any
        self.kernel(2, 2)
        if self.has_precision:
            self.kernel(2, 2, precision="float32")  # compile (or load) before timing
        probe = timed(lambda: self.kernel(4, 30)) / (4 * n * 30)
        self.ntraj = max(4, int(seconds / (probe * n * LAYERS)))
        x0 = starts(BATCH, n, d)
        self.x0 = x0
        probe = timed(lambda: numpy_batched(x0.copy(), 2)) / (BATCH * n * 2)
        self.np_steps = max(2, int(seconds / (probe * BATCH * n)))
        self.peer = PeerStep(x0.copy(), project=not published)
        probe = timed(lambda: self.peer.run(2)) / (BATCH * n * 2)
        self.peer_steps = max(2, int(seconds / (probe * BATCH * n)))
        self.jax_steps = self.np_steps
        self.jax_run = jax_runner(self.jax_steps)
        if self.jax_run is not None:
            import jax

            self.jx0 = jax.device_put(x0)
            self.jax_run(self.jx0).block_until_ready()  # compile

    def kernel(self, ntraj, layers, checkpoints=1, full_d=False, **kw):
        ckpt = np.linspace(0, layers, checkpoints + 1)[1:].round().astype(np.int64)
        rngs = [np.random.default_rng(i) for i in range(ntraj)]
        reduce = self.symmetric.SPAN_REDUCTION if self.symmetric else None
        if full_d:
            self.symmetric.SPAN_REDUCTION = False
        try:
            self.sf.simulate_sphere_flow(rngs, n=self.n, d=self.d, beta=BETA, T=H * layers,
                                         layers=layers, checkpoint_layers=ckpt, **kw)
        finally:
            if full_d:
                self.symmetric.SPAN_REDUCTION = reduce
        return ntraj * self.n * layers

    def table(self):
        """{column: callable}; "full d" only where the kernel would reduce d > n to n."""
        out = {"kernel": lambda: self.kernel(self.ntraj, LAYERS)}
        if self.symmetric is not None and self.d > self.n:
            out["full d"] = lambda: self.kernel(self.ntraj, LAYERS, full_d=True)
        out["60 ck"] = lambda: self.kernel(self.ntraj, LAYERS, 60)
        if self.has_precision:
            out["f32"] = lambda: self.kernel(self.ntraj, LAYERS, precision="float32")
        if self.with_span:
            out["span"] = self.span
        out["numpy"] = self.numpy
        out["peer"] = self.peer_style
        if self.jax_run is not None:
            out["jax"] = self.jax
        return out

    def span(self):
        """`run_partition` on a fresh store (module docstring): the pipeline's own kernel, so
        left out with --module."""
        import shutil
        import tempfile

        from tokensweep.pipeline.execute import run_partition
        from tokensweep.pipeline.spec.load import parse_sweep
        from tokensweep.pipeline.store.cube import create_store

        sweep = parse_sweep({"name": "span", "model": "sphere_flow", "attention": "sa",
                             "grid": {"beta": [BETA], "d": [self.d], "n": self.n},
                             "time": {"T": H * LAYERS, "layers": LAYERS, "checkpoints": 1},
                             "trajectories": SPAN_TRAJECTORIES, "seed": 3})
        folder = tempfile.mkdtemp(prefix="bench-span-")
        try:
            store = f"{folder}/span.zarr"
            create_store(sweep, store)  # once per sweep, not per partition: not timed
            seconds = timed(lambda: run_partition(sweep, store, 0))
        finally:
            shutil.rmtree(folder)
        return SPAN_TRAJECTORIES * self.n * LAYERS, seconds

    def numpy(self):
        numpy_batched(self.x0.copy(), self.np_steps)
        return BATCH * self.n * self.np_steps

    def peer_style(self):
        self.peer.run(self.peer_steps)
        return BATCH * self.n * self.peer_steps

    def jax(self):
        self.jax_run(self.jx0).block_until_ready()
        return BATCH * self.n * self.jax_steps

    def flops(self, name):
        """Flops of one step of one system as `name` computes it (the reduced kernel: d = n)."""
        reduced = name in ("kernel", "60 ck", "f32") and self.symmetric is not None \
            and self.symmetric.SPAN_REDUCTION and self.d > self.n
        return step_flops(self.n, self.n if reduced else self.d)


def measure(fn):
    """Work per CPU second of fn(), which returns its work, or (work, the seconds it timed)."""
    t0 = time.process_time()
    work = fn()
    seconds = time.process_time() - t0
    if isinstance(work, tuple):
        work, seconds = work
    return work / seconds


def agreement(sf, n, d, published, steps=30, batch=16):
    """Largest |x_peer - x_kernel| after `steps` steps from the kernel's own starts."""
    h_layers = dict(T=H * steps, layers=steps, checkpoint_layers=np.array([steps]))
    out = sf.simulate_sphere_flow([np.random.default_rng(i) for i in range(batch)], n=n, d=d,
                                  beta=BETA, return_states=True, **h_layers)
    x0 = np.array([np.random.default_rng(i).standard_normal((n, d)) for i in range(batch)])
    x0 /= np.linalg.norm(x0, axis=2, keepdims=True)
    peer = PeerStep(x0, project=not published).run(steps)
    return float(np.max(np.abs(peer - out["states"][:, 0])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=REPEATS)
    ap.add_argument("--seconds", type=float, default=TARGET_SECONDS, help="per measurement")
    ap.add_argument("--sizes", default=",".join(f"{n}x{d}" for n, d in SIZES), help="n x d, ...")
    ap.add_argument("--published", action="store_true",
                    help="peer step without the tangent projection, as published")
    ap.add_argument("--no-span", action="store_true", help="leave out the partition span")
    ap.add_argument("--module", default="tokensweep.kernels.sphere.flow",
                    help="the kernel module (e.g. an old copy, for before / after)")
    args = ap.parse_args()
    jax = import_jax_one_core()
    sf = importlib.import_module(args.module)
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    load0 = os.getloadavg()
    peak = max(dgemm_peak() for _ in range(3))
    rows = []
    for n, d in sizes:
        with_span = not (args.no_span or args.module != ap.get_default("module"))
        m = Methods(sf, n, d, args.seconds, args.published, with_span)
        if m.with_span:
            m.span()  # numba's cache and the pipeline's imports, once
        fns = m.table()
        best = dict.fromkeys(fns, 0.0)
        for _ in range(args.repeats):
            for name, fn in fns.items():
                best[name] = max(best[name], measure(fn))
            peak = max(peak, dgemm_peak(repeats=1))
        rows.append((n, d, best, m))
    load1 = os.getloadavg()
    if jax is None:
        print("note: jax is not installed (pip install jax): the JAX column is left out")
    print(f"SA, Q = K = V = I, retraction Euler, beta = {BETA}, h = {H}, one core, CPU time, best "
          f"of {args.repeats}; load average {load0[0]:.2f} -> {load1[0]:.2f} on {os.cpu_count()} "
          f"CPUs; DGEMM peak {peak:.1f} GFLOP/s (numpy matmul 1024^2, one thread); kernel: "
          f"{args.module}")
    published = "; peer as published (no projection)" if args.published else ""
    print("particle-steps/s; k/x = kernel / x; %pk = flops per second / DGEMM peak (float32: "
          "against the float64 peak)" + published)
    order = ("kernel", "full d", "60 ck", "f32", "span", "numpy", "peer", "jax")
    names = [k for k in order if any(k in row[2] for row in rows)]
    ratios = [r for r in ("peer", "jax", "numpy") if r in names]
    span_ratios = [r for r in ("peer", "jax") if r in names and "span" in names]
    pk = [r for r in ("kernel", "full d", "f32", "jax", "peer") if r in names]
    head = f"{'n':>4} {'d':>4} " + " ".join(f"{k:>9}" for k in names)
    head += " " + " ".join(f"{'k/' + r:>7}" for r in ratios)
    head += "".join(f" {'span/' + r:>9}" for r in span_ratios)
    head += " " + " ".join(f"{'%pk ' + r:>10}" for r in pk)
    print(head)
    for n, d, best, m in rows:
        line = f"{n:4d} {d:4d} " + " ".join(f"{best[k]:9.3e}" if k in best else f"{'-':>9}"
                                            for k in names)
        line += " " + " ".join(f"{best['kernel'] / best[r]:7.2f}" for r in ratios)
        line += "".join(f" {best['span'] / best[r]:9.2f}" for r in span_ratios)
        line += " " + " ".join(f"{100 * best[r] / n * m.flops(r) / (peak * 1e9):9.1f}%"
                               if r in best else f"{'-':>10}" for r in pk)
        print(line)
    for n, d, _, m in rows:
        print(f"n = {n}, d = {d}: ntraj x layers {m.ntraj} x {LAYERS}; numpy / peer / jax "
              f"{BATCH} systems x {m.np_steps} / {m.peer_steps} / {m.jax_steps} steps; "
              f"max |x_peer - x_kernel| after 30 steps {agreement(sf, n, d, args.published):.1e}")


if __name__ == "__main__":
    main()
