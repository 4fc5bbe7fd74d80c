"""Two trajectories of the lanes path side by side, sixteen lanes: bit-identical to one at a time.

`stochastic.lanes` runs one trajectory's tokens in the eight lanes of one vector; what is left
there (besides the draws) is latency: the Householder R is two chains of dependent adds per
column (the dot products, then the next column's norm), and the attention's sums and the step's
norms are short chains too, so the adders mostly wait. The chains of two trajectories are
independent, so here two trajectories A and B share every pass: the state xt (d, 16) holds A's
tokens in lanes 0-7 and B's in lanes 8-15 (`lowlevel.simd.wide_type`, <16 x double>), each lane doing
exactly the operations of `stochastic.lanes` in the same order, and the out-of-order core
overlaps A's chains with B's. Each trajectory keeps its own Generator and draws its own buffer
at the same layers as alone, so the random streams, the results and the Generators' final
states are those of `trajectory_lanes` (tests/test_kernel_stochastic_lanes.py).

Where the two differ:
- per-trajectory scalars (a column's alpha, norm, R_kk, u_0, |u|^2) are kept twice and enter
  the vectors by `splat2` (A's value in lanes 0-7, B's in 8-15);
- a Householder column that is exactly zero below the diagonal (no reflection, LAPACK tau = 0)
  for one trajectory only: both chains run and `where` keeps that trajectory's columns
  unreflected; its next norm is `householder_lanes`' scalar loop (`_next_norm`);
- from column k = 3 on, the Householder passes carry only the upper four lanes of each
  trajectory (`load_quads`; lanes <= k are never read again): two trajectories' reflections are
  bound by their stores (four 32-byte stores a row), so this halves them;
- the rare paths (an exponent of |e| >= 512, a squared norm 0, inf or NaN) run per lane as there;
  a trajectory whose step fails is flagged, the other one's step completes;
- when one trajectory ends (non-finite step or early stop), the other continues alone in
  `stochastic.lanes.continue_lanes` from the next layer with its buffer, position and checkpoint.
Sums of eight accumulators there are blocked by two here (rows of the Gram, columns of Ahat and
of the noise): 2 x 4 vector registers, against 16 on AVX2; each sum keeps its order.
`stochastic.transformer._run` hands trajectories 2u, 2u + 1 to one call (an odd last one runs alone), also
on threads (a pair is a unit of work; results do not depend on the thread count).

Where the time goes, ns per trajectory-step (n = 8, SA, beta = 1; the split of
`benchmarks/bench_stochastic.py`, each part alone on states along a trajectory, best of 5,
`taskset -c 1`, a 2-core VM shared with other jobs, load average 6-7 during the run; the
draws are the same for both paths):

    d  | path  | draws  overlaps  attention     R  noise  step
    4  | lanes |   172        40        151   126     17    32
    4  | pairs |   172        26        164   136     24    25
    16 | lanes |  1334       141        193   451     93    53
    16 | pairs |  1334        70        230   322     87    55
    64 | lanes |  5272       575        453  1387    363   157
    64 | pairs |  5272       197        377   776    242   126

The overlaps halve (eight accumulators of 16 lanes, no longer latency-bound), the R drops by
30-45 % at d >= 16 (its per-column scalar chain, sqrt -> u_0 -> dot products -> division ->
reflections -> next norm, stays serial per pair; at d = 4 that chain is all there is), the
attention does not move (its exponentials' table lookups, lane by lane, bound it by
throughput). Whole kernel: 1.0-1.3x the lanes path, run to run on this shared machine
(`bench_stochastic.py`'s "lanes" column), where the draws (~11 ns a normal with numpy's PCG64
inside njit) are 55-65 % of a step at d >= 16.
"""

import numpy as np
from numba import njit

from .. import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    observables,
)
from ..attention import USA, gram, normalize_rows, uniform_start
from ..lowlevel.simd import (
    WIDE,
    WIDTH,
    add,
    all_normal,
    div,
    load16,
    mul,
    splat2,
    splat16,
    sqrt,
    store,
)
from ..outcomes import finish_trajectory, record_overlaps, resolved_for
from .general import stop
from .householder import householder_pairs
from .lanes import attention_weights, continue_lanes, rare_norms, usa_factors


@njit(nogil=True, cache=True, inline="always")
def gram_pairs(xt, n, g16):
    """g16 (8, 16): row i, lane j (8 t + j) = <x_i, x_j> of trajectory t, summed over k in order
    from 0.0 (as `gram_lanes`); rows i < n only (no other row is read)."""
    for i in range(0, n, 2):
        i1 = min(i + 1, n - 1)  # n odd: the last pass computes row n - 1 twice
        a0 = a1 = splat16(0.0)
        for k in range(xt.shape[0]):
            row = load16(xt, k * WIDE)
            a0 = add(a0, mul(splat2(xt[k, i], xt[k, WIDTH + i]), row))
            a1 = add(a1, mul(splat2(xt[k, i1], xt[k, WIDTH + i1]), row))
        store(g16, i * WIDE, a0)
        store(g16, i1 * WIDE, a1)


@njit(nogil=True, cache=True, inline="always")
def attention_pairs(xt, g16, n, beta, kind, ahat_t, logscale, expo, wt, mask, norms):
    """`attention_lanes` for both trajectories: ahat_t (d, 16), logscale (16,), expo (16,),
    wt (16 n,), mask (16,) 1 in lanes < n of each half, norms (16,) as there."""
    d = xt.shape[0]
    sv = attention_weights(g16, n, beta, kind, logscale, expo, wt, mask, splat16(0.0))
    nrm = splat16(0.0)
    k = 0
    while k + 2 <= d:
        s0 = s1 = splat16(0.0)
        for j in range(n):
            wj = load16(wt, j * WIDE)
            s0 = add(s0, mul(wj, splat2(xt[k, j], xt[k, WIDTH + j])))
            s1 = add(s1, mul(wj, splat2(xt[k + 1, j], xt[k + 1, WIDTH + j])))
        s0 = mul(s0, sv)
        s1 = mul(s1, sv)
        store(ahat_t, k * WIDE, s0)
        store(ahat_t, (k + 1) * WIDE, s1)
        if k > 0:
            nrm = add(nrm, mul(s0, s0))
        nrm = add(nrm, mul(s1, s1))
        k += 2
    if k < d:
        s0 = splat16(0.0)
        for j in range(n):
            s0 = add(s0, mul(load16(wt, j * WIDE), splat2(xt[k, j], xt[k, WIDTH + j])))
        s0 = mul(s0, sv)
        store(ahat_t, k * WIDE, s0)
        if k > 0:
            nrm = add(nrm, mul(s0, s0))
    store(norms, 0, nrm)


@njit(nogil=True, cache=True, inline="always")
def noise_pairs(rl, s, buf_a, buf_b, off, dir_t, rs):
    """`noise_lanes` for both trajectories: dir_t (d, 16), W_a = buf_a[off:off + r d] and W_b
    likewise (r, d); rs (16 r,) work."""
    r = rl.shape[0]
    d = dir_t.shape[0]
    sv = splat16(s)
    for k in range(r):
        store(rs, k * WIDE, mul(sv, load16(rl, k * WIDE)))
    c = 0
    while c + 2 <= d:
        s0 = s1 = splat16(0.0)
        for k in range(r):
            rk = load16(rs, k * WIDE)
            base = off + k * d + c
            s0 = add(s0, mul(rk, splat2(buf_a[base], buf_b[base])))
            s1 = add(s1, mul(rk, splat2(buf_a[base + 1], buf_b[base + 1])))
        store(dir_t, c * WIDE, s0)
        store(dir_t, (c + 1) * WIDE, s1)
        c += 2
    if c < d:
        s0 = splat16(0.0)
        for k in range(r):
            base = off + k * d + c
            s0 = add(s0, mul(load16(rs, k * WIDE), splat2(buf_a[base], buf_b[base])))
        store(dir_t, c * WIDE, s0)


@njit(nogil=True, cache=True, inline="always")
def step_pairs(xt, n, kind, coef, logscale, dir_t, fx, fa, norm2, inv, pad, column):
    """`step_lanes` for both trajectories; returns (ok_a, ok_b). fx, fa, norm2, inv, pad (16,)."""
    d = xt.shape[0]
    if kind == USA:
        usa_factors(logscale, n, coef, fx, fa)
        fxv = load16(fx, 0)
        fav = load16(fa, 0)
    else:
        fxv = splat16(1.0)
        fav = splat16(coef)
    nrm = splat16(0.0)
    for k in range(d):
        y = add(mul(fxv, load16(xt, k * WIDE)), mul(fav, load16(dir_t, k * WIDE)))
        store(xt, k * WIDE, y)
        nrm = add(nrm, mul(y, y))
    nrm = add(nrm, load16(pad, 0))
    ok_a = ok_b = True
    if all_normal(nrm):
        iv = div(splat16(1.0), sqrt(nrm))
    else:
        store(norm2, 0, nrm)
        ok_a = rare_norms(xt, n, 0, norm2, inv, column)
        ok_b = rare_norms(xt, n, WIDTH, norm2, inv, column)
        iv = load16(inv, 0)
    for k in range(d):
        store(xt, k * WIDE, mul(load16(xt, k * WIDE), iv))
    return ok_a, ok_b


@njit(nogil=True, cache=True)
def _half_to_rows(xt, t, x):
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            x[i, k] = xt[k, WIDTH * t + i]


@njit(nogil=True, cache=True)
def _checkpoint(xt, t, x, g, beta, eps, out, r, c, states, window):
    """Trajectory t's outputs at checkpoint c (as `trajectory_lanes`); True if it stops early."""
    _half_to_rows(xt, t, x)
    gram(x, g)
    record_overlaps(g, eps, out, r, c)
    observables.observe(x, g, beta, out, r, c)
    if states.shape[1] > 0:
        states[r, c] = x
    if resolved_for(out, r, c, window):
        stop(out, r, c, states, x)
        return True
    return False


@njit(nogil=True, cache=True)
def _alone(rng, x, xt, t, layer, buf, pos, c, beta, att, s, h, layers, ckpt, times, eps, batch,
           window, out, r, states):
    """Trajectory t (alive after `layer` layers) goes on by itself, then is finished."""
    d = xt.shape[0]
    xt8 = np.zeros((d, WIDTH))
    for k in range(d):
        for i in range(WIDTH):
            xt8[k, i] = xt[k, WIDTH * t + i]
    ok = continue_lanes(rng, x, xt8, layer, buf, pos, c, beta, att, s, h, layers, ckpt, eps,
                        batch, window, out, r, states)
    finish_trajectory(out, r, ok, times)


@njit(nogil=True, cache=True)
def trajectory_pairs(rng_a, x_a, rng_b, x_b, draw_start, beta, att, s, h, layers, ckpt, times, eps,
                     batch, window, out, ra, rb, states):
    """`trajectory_lanes` for trajectories ra (rng_a, x_a) and rb (rng_b, x_b), side by side
    while both run; the same arguments otherwise, the same streams and results."""
    n, d = x_a.shape
    ok_a = uniform_start(rng_a, x_a) if draw_start else normalize_rows(x_a)
    observables.record_start(x_a, out, ra)
    ok_b = uniform_start(rng_b, x_b) if draw_start else normalize_rows(x_b)
    observables.record_start(x_b, out, rb)
    rank = min(n, d)
    per_layer = rank * d
    xt = np.zeros((d, WIDE))
    for i in range(n):
        for k in range(d):
            xt[k, i] = x_a[i, k]
            xt[k, WIDTH + i] = x_b[i, k]
    at = np.zeros((d, WIDE))
    dir_t = np.zeros((d, WIDE))
    rl = np.zeros((rank, WIDE))
    rs = np.zeros(rank * WIDE)
    g16 = np.zeros((WIDTH, WIDE))
    g = np.empty((n, n))
    mask, pad = np.zeros(WIDE), np.ones(WIDE)
    mask[:n] = 1.0
    mask[WIDTH:WIDTH + n] = 1.0
    pad[:n] = 0.0
    pad[WIDTH:WIDTH + n] = 0.0
    fx, fa = np.ones(WIDE), np.zeros(WIDE)
    norm2, inv, norms = np.zeros(WIDE), np.ones(WIDE), np.zeros(WIDE)
    column = np.empty((1, d))
    logscale = np.zeros(WIDE)
    expo, wt = np.empty(WIDE), np.empty(n * WIDE)
    sqrt_h = np.sqrt(h)
    buf_a = buf_b = np.empty(0)
    pos = np.int64(0)  # int64s, not literals (kernels/__init__.py)
    c_a = c_b = np.int64(0)
    first, second = np.int64(0), np.int64(1)
    stop_a = stop_b = False
    layer = 0
    while ok_a and ok_b and not (stop_a or stop_b) and layer < layers:
        if pos == buf_a.shape[0]:  # both draw at the same layers as alone (same sizes)
            size = min(batch, layers - layer) * per_layer
            buf_a = rng_a.standard_normal(size)
            buf_b = rng_b.standard_normal(size)
            pos = np.int64(0)
        gram_pairs(xt, n, g16)
        attention_pairs(xt, g16, n, beta, att, at, logscale, expo, wt, mask, norms)
        householder_pairs(at, n, rl, norms)
        noise_pairs(rl, s, buf_a, buf_b, pos, dir_t, rs)
        pos += per_layer
        ok_a, ok_b = step_pairs(xt, n, att, sqrt_h, logscale, dir_t, fx, fa, norm2, inv, pad,
                                column)
        layer += 1
        if layer == ckpt[c_a]:  # c_a == c_b here
            if ok_a:
                stop_a = _checkpoint(xt, first, x_a, g, beta, eps, out, ra, c_a, states, window)
                c_a += 1
            if ok_b:
                stop_b = _checkpoint(xt, second, x_b, g, beta, eps, out, rb, c_b, states, window)
                c_b += 1
    # whoever is still running goes on alone (nothing is left when both reached `layers`)
    if ok_a and not stop_a and layer < layers:
        _alone(rng_a, x_a, xt, first, layer, buf_a, pos, c_a, beta, att, s, h, layers, ckpt, times,
               eps, batch, window, out, ra, states)
    else:
        finish_trajectory(out, ra, ok_a, times)
    if ok_b and not stop_b and layer < layers:
        _alone(rng_b, x_b, xt, second, layer, buf_b, pos, c_b, beta, att, s, h, layers, ckpt, times,
               eps, batch, window, out, rb, states)
    else:
        finish_trajectory(out, rb, ok_b, times)
