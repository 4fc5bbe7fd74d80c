"""Throughput of the deep stochastic transformer kernel against its RNG bound, numpy and JAX.

Run:  python benchmarks/bench_stochastic.py             (a few minutes; pinned to one core)
      python benchmarks/bench_stochastic.py --profile   (only the per-component split, n = 8)
      python benchmarks/bench_stochastic.py --threads   (one partition on 1 and 2 threads)

Unit: trajectory-steps per second, one trajectory advanced one layer = 1 step. SA attention,
beta = 1, h = 0.01, gaussian noise path. The default run prints, in one run, at n = 8,
d in {4, 16, 64} (and n = 2, whose fused path is not split, for context):

- kernel: `simulate_stochastic_transformer`, one trajectory per Generator, 2000 layers each;
  at n = 8 it takes the lanes path two trajectories at a time (`stochastic.pairs`); lanes: the
  same call one trajectory at a time (`stochastic.transformer._PAIRS` off, `stochastic.lanes`); general:
  the lanes path switched off (`stochastic.transformer._LANES`), i.e. the general path that ran n = 8
  before it (all three bit-identical); x: kernel / lanes, kernel / general;
- every rate is timed by the CPU time of the process (all its threads; it is pinned to one
  core), so other load on a shared machine counts little (it still costs caches), and is the
  best of ROUNDS = 3 rounds, each of which measures every column of the row once (load comes
  in bursts of seconds: the rounds spread each column's measurements over the row's time);
- rng-bound: the rate if a step cost only drawing its min(n, d)*d normals with the same numpy
  Generator inside njit (buffers of NORMALS_PER_DRAW, as the kernel), nothing else; %: kernel / it,
  % ln: lanes / it, % gen: general / it;
- numpy-lit / numpy-qr: plain numpy vectorised over a batch of B = 256 trajectories (B x n x d),
  drawing the literal V_k (B x d x d normals per layer), resp. the exact Gaussian shortcut (batched
  QR of A, B x n x d normals, as the kernel); x: kernel / the faster of the two; x ln, x gen:
  lanes, general / the faster of the two;
- jax: the same model in JAX as a JAX user writes it (float64, jit, the B = 256 batch as a leading
  axis, `lax.scan` over 200 steps, softmax, a Cholesky of the n x n Gram of the attention outputs
  per step, `jax.random.normal`), one core (XLA_FLAGS below); x: kernel / jax. Skipped with a note
  when jax is not installed (`pip install tokensweep[bench]`);
- the split (n = 8): each part of a lanes-path layer in isolation, in ns per step, on states
  taken along a trajectory (after 1, 500, 1000 and 2000 layers: spread, then collapsed tokens;
  mean over the states of the best of 5 rounds, CPU time of this thread): the draws (a layer's
  share of one buffered draw), the overlaps (`gram_lanes`), the attention (logits, exponentials by
  `lanes.exp`, Ahat), the Householder R, the noise s W^T R, the step with its normalisation, and
  the checkpoint reductions (back to rows + overlaps + class + cluster count; once per
  checkpoint, not per layer). "sum" adds the per-layer parts, "kernel" is the whole kernel per
  step (CPU time). Row "lanes": one trajectory (`stochastic.lanes`); row "pairs": the same parts
  of `stochastic.pairs` on two states side by side (two consecutive states of the list), per
  trajectory (half the time of a call), with the draws and checkpoint of the lanes row.

The process is pinned to one core (sched_setaffinity) when the OS allows it; the load average is
printed with the table, as the machine may be shared. --threads runs one partition (200
trajectories) with threads=1 and threads=2 (wall time; not pinned).

Threads: NUMBA_NUM_THREADS, OMP/OPENBLAS/MKL_NUM_THREADS are set to 1 before the imports, and
XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1".
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from tokensweep.kernels import attention as att  # noqa: E402
from tokensweep.kernels.outcomes import allocate_outputs, record_overlaps  # noqa: E402
from tokensweep.kernels.stochastic import (  # noqa: E402
    lanes,  # noqa: E402
    pairs,  # noqa: E402
)
from tokensweep.kernels.stochastic import transformer as stochastic  # noqa: E402
from tokensweep.kernels.stochastic.transformer import (  # noqa: E402
    NORMALS_PER_DRAW,
    simulate_stochastic_states,
    simulate_stochastic_transformer,
)

BETA, H, B, KERNEL_LAYERS = 1.0, 0.01, 256, 2000
TARGET_S = 0.25  # seconds per timed measurement
ROUNDS = 3  # the table's rates: best of this many rounds, each measuring every column once
CLOCK = time.process_time  # CPU time of the (pinned) process: robust to other load on the machine


def numpy_step_literal(x, rng):
    s = BETA * x @ x.transpose(0, 2, 1)
    w = np.exp(s - s.max(axis=2, keepdims=True))
    a = (w / w.sum(axis=2, keepdims=True)) @ x
    v = rng.standard_normal((x.shape[0], x.shape[2], x.shape[2]))
    y = x + np.sqrt(H) * a @ v.transpose(0, 2, 1)
    return y / np.linalg.norm(y, axis=2, keepdims=True)


def numpy_step_qr(x, rng):
    s = BETA * x @ x.transpose(0, 2, 1)
    w = np.exp(s - s.max(axis=2, keepdims=True))
    a = (w / w.sum(axis=2, keepdims=True)) @ x
    r = np.linalg.qr(a.transpose(0, 2, 1), mode="r")  # (B, min(n, d), n)
    z = rng.standard_normal((x.shape[0], r.shape[1], x.shape[2]))
    y = x + np.sqrt(H) * r.transpose(0, 2, 1) @ z
    return y / np.linalg.norm(y, axis=2, keepdims=True)


def numpy_rate(step, n, d):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, n, d))
    x /= np.linalg.norm(x, axis=2, keepdims=True)
    x = step(x, rng)  # warm-up
    layers, elapsed = 1, 0.0
    while elapsed < TARGET_S:
        layers *= 2
        t0 = CLOCK()
        for _ in range(layers):
            x = step(x, rng)
        elapsed = CLOCK() - t0
    return B * layers / elapsed


def kernel_rate(noise, n, d, clock=CLOCK, use_lanes=True, use_pairs=True):
    """Kernel steps per second; use_lanes=False: the general path (`stochastic.transformer._LANES` off);
    use_pairs=False: the lanes path one trajectory at a time (`stochastic.transformer._PAIRS` off)."""
    def run(ntraj):
        rngs = [np.random.default_rng([1, i]) for i in range(ntraj)]
        stochastic._LANES, stochastic._PAIRS = use_lanes, use_pairs
        try:
            t0 = clock()
            simulate_stochastic_transformer(rngs, n=n, d=d, beta=BETA, T=H * KERNEL_LAYERS,
                                            layers=KERNEL_LAYERS, checkpoint_layers=[KERNEL_LAYERS],
                                            noise=noise)
            return clock() - t0
        finally:
            stochastic._LANES, stochastic._PAIRS = True, True

    run(2)  # JIT warm-up (or cache load), of the pairs path too
    ntraj, elapsed = 1, run(1)
    while elapsed < TARGET_S:
        ntraj = max(2 * ntraj, int(ntraj * 1.2 * TARGET_S / max(elapsed, 1e-6)))
        elapsed = run(ntraj)
    return ntraj * KERNEL_LAYERS / elapsed


@njit(nogil=True, cache=True)
def _draw(rng, per_step, steps, chunk):
    """Draw per_step normals for each of steps steps, chunk at a time (as the kernel buffers)."""
    batch = max(1, chunk // per_step)
    acc = 0.0
    left = steps
    while left > 0:
        buf = rng.standard_normal(min(batch, left) * per_step)
        acc += buf[0]
        left -= min(batch, left)
    return acc


def rng_bound(n, d):
    """Steps per second if a step only drew its min(n, d)*d normals (same Generator, in njit)."""
    per_step = min(n, d) * d
    rng = np.random.default_rng(2)
    _draw(rng, per_step, 10, NORMALS_PER_DRAW)
    steps, elapsed = 1000, 0.0
    while elapsed < TARGET_S:
        steps *= 2
        t0 = CLOCK()
        _draw(rng, per_step, steps, NORMALS_PER_DRAW)
        elapsed = CLOCK() - t0
    return steps / elapsed


def jax_rate(n, d, steps=200):
    """Steps per second of the same model in JAX (module docstring); None without jax."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    jitter = 1e-12 * jnp.eye(n)  # the Gram is singular once tokens collapse

    def step(x, key):
        a = jax.nn.softmax(BETA * jnp.einsum("bid,bjd->bij", x, x), axis=-1) @ x
        chol = jnp.linalg.cholesky(jnp.einsum("bid,bjd->bij", a, a) + jitter)
        y = x + np.sqrt(H) * chol @ jax.random.normal(key, x.shape, dtype=x.dtype)
        return y / jnp.linalg.norm(y, axis=-1, keepdims=True), None

    run = jax.jit(lambda x, key: jax.lax.scan(step, x, jax.random.split(key, steps))[0])
    x = np.random.default_rng(0).standard_normal((B, n, d))
    x = jnp.asarray(x / np.linalg.norm(x, axis=2, keepdims=True))
    key = jax.random.key(0)
    x = run(x, key).block_until_ready()  # compile
    best = np.inf
    for rep in range(3):
        t0 = CLOCK()
        x = run(x, jax.random.fold_in(key, rep)).block_until_ready()
        best = min(best, CLOCK() - t0)
    return B * steps / best


@njit(nogil=True)
def _p_draw(rng, per_layer, reps):
    batch = max(1, NORMALS_PER_DRAW // per_layer)
    for _ in range(reps):
        rng.standard_normal(batch * per_layer)
    return batch


@njit(nogil=True)
def _p_gram(xt, g8, reps):
    for _ in range(reps):
        lanes.gram_lanes(xt, g8)


@njit(nogil=True)
def _p_attention(xt, g8, at, norms, reps):
    logscale, mask, expo, wt = np.zeros(8), np.ones(8), np.empty(8), np.empty(64)
    for _ in range(reps):
        lanes.attention_lanes(xt, g8, 8, BETA, att.SA, at, logscale, expo, wt, mask, norms)


@njit(nogil=True)
def _p_copy(src, dst, reps):
    for _ in range(reps):
        dst[:, :] = src


@njit(nogil=True)
def _p_qr(ahat_t, at, rl, norms, reps):
    for _ in range(reps):
        at[:, :] = ahat_t
        lanes.householder_lanes(at, 8, rl, norms)


@njit(nogil=True)
def _p_values(rl, buf, dir_t, reps):
    rs = np.empty(rl.size)
    for _ in range(reps):
        lanes.noise_lanes(rl, 1.0, buf, 0, dir_t, rs)


@njit(nogil=True)
def _p_step(xt0, xt, logscale, dir_t, reps):
    fx, fa, norm2, inv, pad = np.ones(8), np.zeros(8), np.zeros(8), np.ones(8), np.zeros(8)
    column = np.empty((1, xt.shape[0]))
    for _ in range(reps):
        xt[:, :] = xt0
        lanes.step_lanes(xt, 8, att.SA, np.sqrt(H), logscale, dir_t, fx, fa, norm2, inv, pad, column)


@njit(nogil=True)
def _p_checkpoint(xt, x, g, out, reps):
    for _ in range(reps):
        lanes._to_rows(xt, x)
        att.gram(x, g)
        record_overlaps(g, 1e-3, out, 0, 0)


@njit(nogil=True)
def _q_gram(xt, g16, reps):
    for _ in range(reps):
        pairs.gram_pairs(xt, 8, g16)


@njit(nogil=True)
def _q_attention(xt, g16, at, norms, reps):
    logscale, mask, expo, wt = np.zeros(16), np.ones(16), np.empty(16), np.empty(128)
    for _ in range(reps):
        pairs.attention_pairs(xt, g16, 8, BETA, att.SA, at, logscale, expo, wt, mask, norms)


@njit(nogil=True)
def _q_qr(ahat_t, at, rl, norms, reps):
    for _ in range(reps):
        at[:, :] = ahat_t
        pairs.householder_pairs(at, 8, rl, norms)


@njit(nogil=True)
def _q_values(rl, buf, dir_t, reps):
    rs = np.empty(rl.size)
    for _ in range(reps):
        pairs.noise_pairs(rl, 1.0, buf, buf, 0, dir_t, rs)


@njit(nogil=True)
def _q_step(xt0, xt, logscale, dir_t, reps):
    fx, fa, norm2, inv, pad = np.ones(16), np.zeros(16), np.zeros(16), np.ones(16), np.zeros(16)
    column = np.empty((1, xt.shape[0]))
    for _ in range(reps):
        xt[:, :] = xt0
        pairs.step_pairs(xt, 8, att.SA, np.sqrt(H), logscale, dir_t, fx, fa, norm2, inv, pad, column)


def best_ns(jobs, reps, rounds=5):
    """Best-of-rounds thread CPU time per call (ns) of each (function, args), taken in turn."""
    best = [np.inf] * len(jobs)
    for f, a in jobs:
        f(*a, 1)
    for _ in range(rounds):
        for q, (f, a) in enumerate(jobs):
            t0 = time.thread_time()
            f(*a, reps)
            best[q] = min(best[q], time.thread_time() - t0)
    return [b / reps * 1e9 for b in best]


def profile_state(x, rng, reps):
    """ns per call of each component of the lanes path (n = 8) on the state x (n, d)."""
    n, d = x.shape
    r = min(n, d)
    xt, g8 = np.ascontiguousarray(x.T), np.zeros((8, 8))
    ahat_t, norms, rl = np.zeros((d, 8)), np.zeros(8), np.zeros((r, 8))
    lanes.gram_lanes(xt, g8)
    _p_attention(xt, g8, ahat_t, norms, 1)
    lanes.householder_lanes(ahat_t.copy(), n, rl, norms)
    buf, dir_t = rng.standard_normal(r * d), np.zeros((d, 8))
    out = allocate_outputs(1, 1)
    t = best_ns([(_p_draw, (rng, r * d)), (_p_gram, (xt, g8)),
                 (_p_attention, (xt, g8, ahat_t.copy(), norms.copy())),
                 (_p_qr, (ahat_t, ahat_t.copy(), rl, norms)), (_p_copy, (ahat_t, ahat_t.copy())),
                 (_p_values, (rl, buf, dir_t)), (_p_step, (xt, xt.copy(), np.zeros(8), dir_t)),
                 (_p_copy, (xt, xt.copy())), (_p_checkpoint, (xt, x.copy(), np.empty((n, n)), out))],
                reps)
    per_batch = max(1, NORMALS_PER_DRAW // (r * d))
    return {"draws": t[0] / per_batch, "gram": t[1], "attention": t[2], "R": t[3] - t[4],
            "noise": t[5], "step": t[6] - t[7], "checkpoint": t[8]}


def profile_pair_state(xa, xb, reps):
    """ns per trajectory-step of each part of the pairs path (n = 8) on the states xa, xb."""
    n, d = xa.shape
    r = min(n, d)
    xt = np.ascontiguousarray(np.concatenate([xa.T, xb.T], axis=1))
    g16, ahat_t, norms, rl = np.zeros((8, 16)), np.zeros((d, 16)), np.zeros(16), np.zeros((r, 16))
    pairs.gram_pairs(xt, n, g16)
    _q_attention(xt, g16, ahat_t, norms, 1)
    pairs.householder_pairs(ahat_t.copy(), n, rl, norms)
    buf, dir_t = np.random.default_rng(0).standard_normal(r * d), np.zeros((d, 16))
    t = best_ns([(_q_gram, (xt, g16)), (_q_attention, (xt, g16, ahat_t.copy(), norms.copy())),
                 (_q_qr, (ahat_t, ahat_t.copy(), rl, norms)), (_p_copy, (ahat_t, ahat_t.copy())),
                 (_q_values, (rl, buf, dir_t)), (_q_step, (xt, xt.copy(), np.zeros(16), dir_t)),
                 (_p_copy, (xt, xt.copy()))], reps)
    return {"gram": t[0] / 2, "attention": t[1] / 2, "R": (t[2] - t[3]) / 2, "noise": t[4] / 2,
            "step": (t[5] - t[6]) / 2}


PARTS = ("draws", "gram", "attention", "R", "noise", "step")


def split(n, d):
    """Per-component ns per step (module docstring), mean over states along a trajectory."""
    layers = [1, 500, 1000, 2000]
    states, _ = simulate_stochastic_states([np.random.default_rng([3, 0])], n=n, d=d, beta=BETA,
                                           T=H * layers[-1], layers=layers[-1],
                                           checkpoint_layers=layers)
    reps = max(200, 200_000 // (n * d))
    rows = [profile_state(np.ascontiguousarray(states[0, c]), np.random.default_rng(c), reps)
            for c in range(len(layers))]
    mean = {k: float(np.mean([row[k] for row in rows])) for k in rows[0]}
    mean["sum"] = sum(mean[p] for p in PARTS)
    mean["kernel"] = 1e9 / kernel_rate("gaussian", n, d, clock=time.thread_time)
    rows = [profile_pair_state(states[0, c], states[0, (c + 1) % len(layers)], reps)
            for c in range(len(layers))]
    two = {k: float(np.mean([row[k] for row in rows])) for k in rows[0]}
    two["draws"] = mean["draws"]
    two["checkpoint"] = mean["checkpoint"]
    two["sum"] = sum(two[p] for p in PARTS)
    two["kernel"] = mean["kernel"]
    stochastic._PAIRS = False
    try:
        mean["kernel"] = 1e9 / kernel_rate("gaussian", n, d, clock=time.thread_time)
    finally:
        stochastic._PAIRS = True
    return mean, two


def split_table(splits):
    head = (f"{'n':>3} {'d':>3} {'path':>6} | " + " ".join(f"{p:>9}" for p in PARTS)
            + f" | {'sum':>7} {'kernel':>7} | {'checkpoint':>10}")
    print("per-component split of the lanes path, one trajectory (lanes) and two side by side "
          "(pairs, per trajectory) (gaussian, SA, beta = 1), ns per step")
    print(head)
    print("-" * len(head))
    for (n, d), both in splits.items():
        for path, m in zip(("lanes", "pairs"), both):
            print(f"{n:>3} {d:>3} {path:>6} | " + " ".join(f"{m[p]:>9.0f}" for p in PARTS)
                  + f" | {m['sum']:>7.0f} {m['kernel']:>7.0f} | {m['checkpoint']:>10.0f}", flush=True)


def profile():
    split_table({(8, d): split(8, d) for d in (4, 16, 64)})


def threads():
    """One partition (200 trajectories) with threads = 1 and 2, wall time, alternating."""
    print(f"one partition, 200 trajectories, wall time (best of 3), {os.cpu_count()} CPUs")
    for n, d, layers in ((2, 4, 10000), (8, 16, 2000)):
        kw = dict(n=n, d=d, beta=BETA, T=H * layers, layers=layers, checkpoint_layers=[layers])
        simulate_stochastic_transformer([np.random.default_rng(0)], threads=2, **kw)  # warm-up
        best = {1: np.inf, 2: np.inf}
        for _ in range(3):
            for t in (1, 2):
                rngs = [np.random.default_rng([5, i]) for i in range(200)]
                t0 = time.perf_counter()
                simulate_stochastic_transformer(rngs, threads=t, **kw)
                best[t] = min(best[t], time.perf_counter() - t0)
        print(f"n = {n}, d = {d:>2}, {layers} layers: threads=1 {best[1]:.2f} s, threads=2 "
              f"{best[2]:.2f} s, speed-up {best[1] / best[2]:.2f}", flush=True)


def pin_one_core():
    """Pin this process to one core (as taskset); returns the core or None."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def main():
    if "--profile" in sys.argv:
        return profile()
    if "--threads" in sys.argv:
        return threads()
    core = pin_one_core()
    print(f"numpy {np.__version__}, numba {numba.__version__}, {platform.processor() or platform.machine()}, "
          f"NUMBA_NUM_THREADS={os.environ['NUMBA_NUM_THREADS']}, BLAS threads 1, B = {B}, "
          f"pinned to core {core}, load average {os.getloadavg()[0]:.2f}")
    t_start = time.perf_counter()
    head = (f"{'n':>3} {'d':>3} | {'kernel':>9} | {'lanes':>9} {'x':>5} | {'general':>9} {'x':>5} | "
            f"{'rng-bound':>9} {'%':>4} {'% ln':>5} {'% gen':>5} | {'numpy-lit':>9} {'numpy-qr':>9} "
            f"{'x':>5} {'x ln':>5} {'x gen':>5} | {'jax':>9} {'x':>5}")
    print("trajectory-steps per second (gaussian noise path)")
    print(head)
    print("-" * len(head))
    no_jax = False
    for n, d in ((2, 4), (2, 16), (2, 64), (8, 4), (8, 16), (8, 64)):
        best = {}
        for _ in range(ROUNDS):  # load comes in bursts: each column's best of the rounds
            rates = {"kernel": kernel_rate("gaussian", n, d),
                     "bound": rng_bound(n, d),
                     "np_lit": numpy_rate(numpy_step_literal, n, d),
                     "np_qr": numpy_rate(numpy_step_qr, n, d)}
            if n > 2:
                rates["one"] = kernel_rate("gaussian", n, d, use_pairs=False)
                rates["general"] = kernel_rate("gaussian", n, d, use_lanes=False)
            for k, v in rates.items():
                best[k] = max(best.get(k, 0.0), v)
        kernel, bound, np_lit, np_qr = best["kernel"], best["bound"], best["np_lit"], best["np_qr"]
        one, general = best.get("one", kernel), best.get("general", kernel)
        jax = jax_rate(n, d)
        no_jax = jax is None
        jax_cols = f"{'-':>9} {'-':>5}" if no_jax else f"{jax:>9.3g} {kernel / jax:>5.1f}"
        best_numpy = max(np_lit, np_qr)
        print(f"{n:>3} {d:>3} | {kernel:>9.3g} | {one:>9.3g} {kernel / one:>5.2f} | "
              f"{general:>9.3g} {kernel / general:>5.2f} | {bound:>9.3g} {100 * kernel / bound:>4.0f} "
              f"{100 * one / bound:>5.0f} {100 * general / bound:>5.0f} | {np_lit:>9.3g} {np_qr:>9.3g} "
              f"{kernel / best_numpy:>5.1f} {one / best_numpy:>5.1f} {general / best_numpy:>5.1f} | "
              f"{jax_cols}", flush=True)
    if no_jax:
        print("jax is not installed: the JAX column is skipped (pip install 'tokensweep[bench]')")
    print()
    split_table({(8, d): split(8, d) for d in (4, 16, 64)})
    print(f"total {time.perf_counter() - t_start:.0f} s, load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
